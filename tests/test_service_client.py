"""The load generator against real loopback servers: records, WAVs, ids, concurrency, kill mid-run."""
from __future__ import annotations

import asyncio
import hashlib
import json
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import soundfile as sf
from aiohttp import web

from pytest_s2st.errors import S2STError
from pytest_s2st import runs
from pytest_s2st.service.client import run_load
from pytest_s2st.service.record import LevelEntry, RequestRecord
from pytest_s2st.service.answers import sse_event
from pytest_s2st.service.server import make_app, serve_app
from pytest_s2st.service.synthesizers import demo_tone_synthesizer
from pytest_s2st.workload import load_workload

WORKLOAD = [
    {"id": "a", "text": "short one", "language": "English", "voice": "Ryan", "seed": 1},
    {"id": "b", "text": "a somewhat longer second sentence", "language": "English", "voice": "Vivian", "seed": 2},
    {"id": "c", "text": "第三句", "language": "Chinese", "voice": "Vivian", "seed": 3, "instruct": "slowly"},
]


def run(coro, bound=25):
    return asyncio.run(asyncio.wait_for(coro, bound))


async def tone_server(**kw):
    app = make_app(demo_tone_synthesizer(**kw), identity={"code": "t"}, queue_size=16, chunk_samples=1000)
    runner, port = await serve_app(app, shutdown_timeout=0.5)
    return runner, f"http://127.0.0.1:{port}"


def test_records_wavs_ids_and_summary(tmp_path):
    async def main():
        runner, base = await tone_server()
        try:
            return await run_load(base, WORKLOAD, 2, out_dir=tmp_path, warmups=2, requests=5)
        finally:
            await runner.cleanup()

    result = run(main())
    ids = sorted(r["id"] for r in result.records)
    assert ids == ["c2-r0", "c2-r1", "c2-r2", "c2-r3", "c2-r4", "c2-w0", "c2-w1"]
    assert all(r["status"] == "ok" and r["error"] is None for r in result.records)
    by_id = {r["id"]: r for r in result.records}
    # workload cycled: measured index i uses item i % 3
    assert [by_id[f"c2-r{i}"]["workload_id"] for i in range(5)] == ["a", "b", "c", "a", "b"]
    assert by_id["c2-r2"]["instruct"] == "slowly" and "instruct" not in by_id["c2-r0"]
    assert by_id["c2-w1"]["warmup"] is True and by_id["c2-r4"]["warmup"] is False

    assert runs.read_records(tmp_path) == result.records  # what was kept is what is read back
    for r in result.records:
        assert 0 <= r["start_t"] <= r["send_t"] <= r["first_audio_t"] <= r["done_t"]
        assert r["send_wall"] == pytest.approx(time.time(), abs=60)
        times = [t for t, _ in r["chunks"]]
        assert times == sorted(times) and times[0] == r["first_audio_t"]
        data, sr = sf.read(runs.wav_path(tmp_path, r["id"]), dtype="int16")
        assert sr == r["sample_rate"] == 24000
        assert sum(n for _, n in r["chunks"]) == 2 * len(data)
        assert r["audio_seconds"] == pytest.approx(len(data) / sr)
        assert hashlib.sha256(data.astype("<i2").tobytes()).hexdigest() == r["pcm_sha256"]
        assert r["streaming"] is False and r["http_status"] == 200
    # demo tone length grows with the text: "b" is longer than "a"
    assert by_id["c2-r1"]["audio_seconds"] > by_id["c2-r0"]["audio_seconds"]
    assert not list((tmp_path / "wav").glob("*.part"))

    saved = json.loads((tmp_path / "summary.json").read_text())
    level = saved["by_concurrency"]["2"]
    assert saved["identity"] == {"code": "t"} and saved["endpoint"].endswith("/v1/audio/speech")
    assert level["summary"]["n"] == 5 and level["summary"]["n_ok"] == 5 and level["warmups"] == 2
    assert level["summary"]["throughput"] == pytest.approx(
        sum(by_id[f"c2-r{i}"]["audio_seconds"] for i in range(5)) / result.wall_s)
    assert LevelEntry.from_dict(level).to_dict() == level

    lines = (tmp_path / runs.REQUESTS).read_text().splitlines()
    assert list(json.loads(lines[0])) == [  # the JSON line's keys, in the order they always had
        "id", "concurrency", "index", "warmup", "workload_id", "text", "language", "voice", "seed", "due_t",
        "start_t", "send_t", "send_wall", "first_audio_t", "chunks", "done_t", "audio_seconds", "sample_rate",
        "http_status", "streaming", "status", "error", "pcm_sha256", "wav", "server_done", "retried"]
    for line in lines:  # a record read back writes the same line
        assert runs.record_json(RequestRecord.from_dict(json.loads(line)).to_dict()) == line


def test_concurrency_is_the_number_in_flight(tmp_path):
    active = {"now": 0, "max": 0, "total": 0}

    async def handler(request):
        active["now"] += 1
        active["total"] += 1
        active["max"] = max(active["max"], active["now"])
        try:
            await asyncio.sleep(0.05)
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            await resp.write(sse_event({"type": "audio", "index": 0, "pcm": "AAABAA==", "sample_rate": 8000}))
            await resp.write(sse_event({"type": "done", "samples": 2, "sample_rate": 8000}))
            return resp
        finally:
            active["now"] -= 1

    async def main():
        app = web.Application()
        app.router.add_post("/v1/audio/speech", handler)
        runner, port = await serve_app(app, shutdown_timeout=0.5)
        try:
            return await run_load(f"http://127.0.0.1:{port}", WORKLOAD, 4, out_dir=tmp_path, warmups=0, requests=16)
        finally:
            await runner.cleanup()

    result = run(main())
    assert active == {"now": 0, "max": 4, "total": 16}
    assert all(r["status"] == "ok" for r in result.records)
    assert result.identity is None and "identity" in result.identity_error  # no /identity route: recorded


def test_default_workload_runs_and_each_level_is_kept(tmp_path):
    workload = load_workload()

    async def main():
        runner, base = await tone_server()
        try:
            for conc in (1, 3):
                await run_load(base, workload, conc, out_dir=tmp_path, warmups=1, requests=3)
            with pytest.raises(S2STError, match="already holds records for concurrency 3"):
                await run_load(base, workload, 3, out_dir=tmp_path, warmups=0, requests=1)
        finally:
            await runner.cleanup()

    run(main())
    ids = {r["id"] for r in runs.read_records(tmp_path)}
    assert ids == {"c1-w0", "c1-r0", "c1-r1", "c1-r2", "c3-w0", "c3-r0", "c3-r1", "c3-r2"}
    assert set(runs.read_summary(tmp_path)["by_concurrency"]) == {"1", "3"}


def test_extra_lands_in_the_level_entry_beside_the_clients_own_keys(tmp_path):
    """run_load alone writes summary.json: the caller's extra (the gate's policy) sits beside wall_s & co."""
    policy = {"max_ttfa_regression_pct": 10, "min_improvement_pct": 5}

    async def main():
        runner, base = await tone_server()
        try:
            return await run_load(base, WORKLOAD, 2, out_dir=tmp_path, warmups=1, requests=3,
                                  extra={"policy": policy, "policy_fingerprint": "f" * 64})
        finally:
            await runner.cleanup()

    result = run(main())
    level = runs.read_summary(tmp_path)["by_concurrency"]["2"]
    assert level["policy"] == policy and level["policy_fingerprint"] == "f" * 64
    assert level["wall_s"] == result.wall_s and level["warmup_wall_s"] == result.warmup_wall_s
    assert level["timed_out"] is False and level["t0_perf"] == result.t0_perf
    assert level["started_wall"] == result.started_wall and level["identity_error"] is None
    assert level["concurrency"] == 2 and level["summary"] == result.summary
    with pytest.raises(S2STError, match="wall_s"):  # the measured keys are not the caller's to set
        run(run_load("http://127.0.0.1:9", WORKLOAD, 1, out_dir=tmp_path / "x", extra={"wall_s": 0}))


def test_summary_is_written_once_per_run_load(tmp_path, monkeypatch):
    calls = []
    write = runs.write_summary

    def counting(*args, **kwargs):
        calls.append(kwargs["concurrency"])
        return write(*args, **kwargs)

    monkeypatch.setattr(runs, "write_summary", counting)

    async def main():
        runner, base = await tone_server()
        try:
            for conc in (1, 2):
                await run_load(base, WORKLOAD, conc, out_dir=tmp_path, warmups=0, requests=2)
        finally:
            await runner.cleanup()

    run(main())
    assert calls == [1, 2]
    assert set(runs.read_summary(tmp_path)["by_concurrency"]) == {"1", "2"}


def test_read_records_tolerates_only_a_truncated_last_line(tmp_path):
    good = [{"id": "c1-r0", "status": "ok"}, {"id": "c1-r1", "status": "error"}]
    for r in good:
        runs.append_record(tmp_path, r)
    path = tmp_path / runs.REQUESTS
    with open(path, "a") as fh:
        fh.write('{"id": "c1-r2", "sta')  # killed mid-write
    assert runs.read_records(tmp_path) == good
    with pytest.raises(S2STError, match="truncated record"):
        run(run_load("http://127.0.0.1:9", WORKLOAD, 1, out_dir=tmp_path))
    path.write_text('{"id": "c1-r0"}\n{broken\n{"id": "c1-r2"}\n')
    with pytest.raises(S2STError, match=r"requests.jsonl:2"):
        runs.read_records(tmp_path)
    assert runs.read_records(tmp_path / "nothing") == []
    with pytest.raises(S2STError):
        runs.wav_path(tmp_path, "../escape")


def test_server_killed_mid_run(tmp_path):
    """A subprocess server is SIGKILLed after a few requests: those finished stay ok and readable,
    every later request is an error with a reason, and the run ends long before its bound."""
    proc, endpoint = _start_tone_server(tmp_path, 0.05)
    out = tmp_path / "run"
    try:
        async def killer():
            while len(runs.read_records(out)) < 6:
                await asyncio.sleep(0.01)
            proc.send_signal(signal.SIGKILL)

        async def main():
            kill = asyncio.create_task(killer())
            t = time.perf_counter()
            result = await run_load(endpoint, WORKLOAD, 2, out_dir=out, warmups=1, requests=40,
                                    timeout_s=5, total_timeout_s=20)
            await kill
            return result, time.perf_counter() - t

        result, took = run(main(), bound=40)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()

    records = runs.read_records(out)
    assert len(records) == 41 and {r["id"] for r in records} == {"c2-w0", *(f"c2-r{i}" for i in range(40))}
    ok = [r for r in records if r["status"] == "ok"]
    errors = [r for r in records if r["status"] == "error"]
    assert 6 <= len(ok) < 41 and len(errors) >= 30
    assert all(r["error"] for r in errors)
    assert all(("connection" in r["error"] or "disconnected" in r["error"] or "broken" in r["error"])
               for r in errors), {r["error"] for r in errors}
    assert all(runs.wav_path(out, r["id"]).exists() for r in ok)
    assert not any(runs.wav_path(out, r["id"]).exists() for r in errors)
    assert took < 15 and not result.timed_out
    assert result.summary["n_error"] == len([r for r in errors if not r["warmup"]])


def test_wav_bytes_are_what_soundfile_writes(tmp_path):
    import io

    pcm = (np.arange(-500, 500) * 37).astype("<i2")
    buf = io.BytesIO()
    sf.write(buf, pcm, 22050, subtype="PCM_16", format="WAV")
    assert runs.wav_bytes(pcm.tobytes(), 22050) == buf.getvalue()
    runs.write_wav_atomic(tmp_path / "x" / "a.wav", pcm.tobytes(), 22050)
    data, sr = sf.read(tmp_path / "x" / "a.wav", dtype="int16")
    assert sr == 22050 and np.array_equal(data, pcm)
    assert sorted(p.name for p in (tmp_path / "x").iterdir()) == ["a.wav"]
    with pytest.raises(ValueError):
        runs.wav_bytes(b"abc", 8000)


def test_default_workload_shape():
    items = load_workload()
    assert len(items) == 12 and len({i["id"] for i in items}) == 12
    assert [i["language"] for i in items] == ["Chinese", "English"] * 6
    assert {i["voice"] for i in items} == {"Vivian", "Ryan"}
    # each voice speaks both languages: voices alternate every two lines
    assert [i["voice"] for i in items[:4]] == ["Vivian", "Vivian", "Ryan", "Ryan"]
    assert len({i["seed"] for i in items}) == 12 and all(isinstance(i["seed"], int) for i in items)


@pytest.mark.parametrize(
    "line, message",
    [
        ('{"id": "a", "text": "t", "language": "en", "voice": "v"}', "missing field 'seed'"),
        ('{"id": "a", "text": "", "language": "en", "voice": "v", "seed": 1}', "field 'text'"),
        ('{"id": "a", "text": "t", "language": "en", "voice": "v", "seed": "1"}', "field 'seed'"),
        ('{"id": "a", "text": "t", "language": "en", "voice": "v", "seed": true}', "field 'seed'"),
        ('{"id": "a", "text": "t", "language": "en", "voice": "v", "seed": 1, "speed": 2}', "unknown field 'speed'"),
        ('{"id": "a", "text": "t", "language": "en", "voice": "v", "seed": 1, "instruct": 3}', "field 'instruct'"),
        ('{"id": "w0", "text": "t", "language": "en", "voice": "v", "seed": 1}', "'w0' repeats"),
        ("[1, 2]", "expected a JSON object"),
        ("{oops", "not valid JSON"),
    ],
)
def test_workload_errors_name_file_line_and_field(tmp_path, line, message):
    good = '{"id": "w0", "text": "t", "language": "en", "voice": "v", "seed": 1}'
    path = tmp_path / "w.jsonl"
    path.write_text(f"{good}\n\n{line}\n")
    with pytest.raises(S2STError, match=rf"w\.jsonl:3: .*{message}"):
        load_workload(path)


def test_workload_empty_or_missing(tmp_path):
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(S2STError, match="no items"):
        load_workload(tmp_path / "empty.jsonl")
    with pytest.raises(S2STError, match="absent.jsonl: workload not found"):
        load_workload(tmp_path / "absent.jsonl")


def test_each_request_leaves_before_the_next_is_built(tmp_path):
    """A phase starts its workers one at a time: request i's bytes reach the socket (send_t) before
    request i+1 is begun (start_t), so no request waits for the others to be built (with aiohttp's
    client, whose body went out from a separate task, that wait put ~7 ms on a c=64 phase's first)."""
    async def main():
        runner, base = await tone_server()
        try:  # the warm-ups leave 8 keep-alive connections, so the measured start does not connect
            return await run_load(base, WORKLOAD, 8, out_dir=tmp_path, warmups=8, requests=8)
        finally:
            await runner.cleanup()

    result = run(main())
    first = sorted(result.measured, key=lambda r: r["index"])
    assert [r["status"] for r in first] == ["ok"] * 8
    for this, nxt in zip(first, first[1:]):
        assert this["start_t"] <= this["send_t"] < nxt["start_t"], (this["id"], nxt["id"])


def _start_tone_server(tmp_path, delay_s: float) -> tuple[subprocess.Popen, str]:
    ident = tmp_path / "identity.json"
    proc = subprocess.Popen([sys.executable, "-m", "pytest_s2st.cli.serve", "--demo-tone", "--demo-delay-s",
                             str(delay_s), "--port", "0", "--identity-output", str(ident)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 20
    while not ident.exists():
        assert proc.poll() is None, proc.stderr.read()
        assert time.monotonic() < deadline, "server never came up"
        time.sleep(0.05)
    return proc, json.loads(ident.read_text())["endpoint"]


def test_client_killed_mid_run_leaves_readable_evidence(tmp_path):
    """SIGKILL the load generator itself: every record on disk is whole, and each ok one has its WAV."""
    server, endpoint = _start_tone_server(tmp_path, 0.01)
    out = tmp_path / "run"
    code = ("import asyncio, sys; from pathlib import Path; from pytest_s2st.service.client import run_load; "
            "from pytest_s2st.workload import load_workload; "
            "asyncio.run(run_load(sys.argv[1], load_workload(), 2, out_dir=Path(sys.argv[2]), requests=500))")
    client = subprocess.Popen([sys.executable, "-c", code, endpoint, str(out)])
    try:
        deadline = time.monotonic() + 20
        while len(runs.read_records(out)) < 8:
            assert client.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        client.send_signal(signal.SIGKILL)
        client.wait(timeout=10)
    finally:
        for proc in (client, server):
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    records = runs.read_records(out)
    assert 8 <= len(records) < 501
    for r in records:
        assert r["status"] == "ok", r
        data, sr = sf.read(runs.wav_path(out, r["id"]), dtype="int16")
        assert hashlib.sha256(data.astype("<i2").tobytes()).hexdigest() == r["pcm_sha256"]
    for wav in (out / "wav").glob("*.wav"):  # no half-written file under a final name
        sf.read(wav, dtype="int16")
    assert not (out / "summary.json").exists()  # the run never finished: no summary claims otherwise


async def _raw_sse_server(send):
    """Raw loopback server: GET (the identity fetch) gets a 404; a POST gets ``send(writer)``, then a close."""
    async def handle(reader, writer):
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            if head.startswith(b"POST"):
                await reader.readexactly(int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0]))
                await send(writer)
            else:
                writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            await writer.drain()
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


def test_ttfa_is_the_first_non_empty_audio_not_the_first_byte(tmp_path):
    """Headers, a comment and an audio event with no samples come 0.3 s apart before the first samples:
    TTFA is send_t -> the server's own send time of the first non-empty audio, not any earlier byte."""
    import base64

    sent = {}

    async def send(writer):
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")
        for piece in (b": keep-alive\n", sse_event({"type": "audio", "index": 0, "pcm": "", "sample_rate": 8000})):
            await writer.drain()
            await asyncio.sleep(0.3)
            writer.write(piece)
        await writer.drain()
        await asyncio.sleep(0.3)
        sent["first_audio"] = time.perf_counter()  # same process, same clock as the client's stamps
        writer.write(sse_event({"type": "audio", "index": 1, "pcm": base64.b64encode(b"\x01\x00" * 4).decode(),
                                "sample_rate": 8000}) + sse_event({"type": "done", "samples": 4}))

    async def main():
        server, base = await _raw_sse_server(send)
        try:
            return await run_load(base, WORKLOAD, 1, out_dir=tmp_path, warmups=0, requests=1)
        finally:
            server.close()

    result = run(main())
    r = result.records[0]
    assert r["status"] == "ok", r["error"]
    ttfa = runs.request_metrics(r)["ttfa_s"]
    expected = sent["first_audio"] - result.t0_perf - r["send_t"]
    # robust by construction: the client stamps the audio after the server stamped its send (one clock, so never
    # before it), and the events it must not be confused with are 0.3 s away: any stamp within half of that
    # gap is this event, whatever the scheduler's delay (the 5 ms window this replaces failed 1 in 3 under load)
    assert ttfa >= 0.6 and expected - 1e-6 <= ttfa < expected + 0.15, (ttfa, expected)
    assert [n for _, n in r["chunks"]] == [0, 8] and r["chunks"][1][0] == r["first_audio_t"]
    assert result.summary["ttfa_s"]["mean"] == pytest.approx(ttfa)


def test_endpoint_given_as_a_base_url_uses_the_speech_path_everywhere(tmp_path):
    """http://host:port and http://host:port/ mean .../v1/audio/speech: sent there, saved so, and the
    same run dir takes all three spellings as one endpoint."""
    async def main():
        runner, base = await tone_server()
        try:
            out = []
            for conc, endpoint in ((1, base), (2, base + "/"), (3, base + "/v1/audio/speech")):
                out.append(await run_load(endpoint, WORKLOAD, conc, out_dir=tmp_path, warmups=0, requests=2))
            return base, out
        finally:
            await runner.cleanup()

    base, results = run(main())
    assert all(r["status"] == "ok" for res in results for r in res.records)  # the server serves only that path
    assert {res.endpoint for res in results} == {base + "/v1/audio/speech"}
    saved = runs.read_summary(tmp_path)
    assert saved["endpoint"] == base + "/v1/audio/speech" and set(saved["by_concurrency"]) == {"1", "2", "3"}
    # the summary's own comparison normalises both sides
    runs.write_summary(tmp_path, {}, concurrency=4, endpoint=base.upper().replace("HTTP", "http"), identity=None)
    with pytest.raises(S2STError, match=r"holds runs against http://127\.0\.0\.1:\d+/v1/audio/speech, not http://"):
        runs.write_summary(tmp_path, {}, concurrency=5, endpoint="http://127.0.0.2:1", identity=None)


@pytest.mark.parametrize("endpoint, why", [
    ("http://127.0.0.1:99999", "port is not a number in 1-65535"),
    ("http://127.0.0.1:-5", "port is not a number in 1-65535"),
    ("http://127.0.0.1:0", "port is not a number in 1-65535"),
    ("http://127.0.0.1:abc", "port is not a number in 1-65535"),
    ("ftp://127.0.0.1:21/x", "scheme 'ftp' is not http or https"),
    ("127.0.0.1:8000", "scheme '(none)' is not http or https"),
    ("http://user:pw@127.0.0.1:8000", "credentials"),
    ("http://[::1", "Invalid IPv6 URL"),
    ("http:///v1/audio/speech", "no host"),
])
def test_bad_endpoint_is_one_line_naming_it(tmp_path, endpoint, why):
    with pytest.raises(S2STError) as e:
        run(run_load(endpoint, WORKLOAD, 1, out_dir=tmp_path))
    assert str(e.value).startswith(f"endpoint {endpoint!r}: {why}") and "\n" not in str(e.value)
    assert not (tmp_path / runs.REQUESTS).exists()  # refused before anything was sent or written
    with pytest.raises(S2STError, match="endpoint"):
        runs.write_summary(tmp_path, {}, concurrency=1, endpoint=endpoint, identity=None)


def test_normalize_endpoint_spellings():
    from pytest_s2st.service.server import SPEECH_PATH

    assert runs.SPEECH_PATH == SPEECH_PATH
    n = runs.normalize_endpoint
    assert n("http://127.0.0.1:8000") == n("http://127.0.0.1:8000/") == n(" HTTP://127.0.0.1:8000/v1/audio/speech#x ") \
        == "http://127.0.0.1:8000/v1/audio/speech"
    assert n("http://Example.ORG:80") == "http://example.org/v1/audio/speech"  # the default port is implied
    assert n("https://h:443/tts?x=1") == "https://h/tts?x=1"
    assert n("http://h:8000?x=1") == "http://h:8000/v1/audio/speech?x=1"  # the query is kept
    assert n("http://[::1]:9") == "http://[::1]:9/v1/audio/speech"
    assert n("http://h/a b\r\n") == "http://h/a%20b"  # nothing can break the request line
    assert n("http://bücher.de/x") == "http://xn--bcher-kva.de/x"
