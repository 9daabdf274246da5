"""The reference speech server on real loopback sockets: health, validation, busy, SSE, identity, loopback."""
from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import aiohttp
import numpy as np
import pytest

from pytest_s2st.errors import S2STError
from pytest_s2st.service.server import check_loopback, make_app, run_server, serve_app
from pytest_s2st.service.synthesizers import demo_tone_synthesizer, pipeline_synthesizer

IDENTITY = {"code": {"version": "test"}, "assets": {"m.bin": "ab" * 32}, "device": "cpu", "threads": 1}


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


async def started(synth, **kw):
    app = make_app(synth, identity=IDENTITY, **kw)
    runner, port = await serve_app(app, shutdown_timeout=0.5)
    return runner, f"http://127.0.0.1:{port}"


def parse_sse(raw: bytes) -> list[dict]:
    events = []
    for block in raw.decode().split("\n\n"):
        if block.strip():
            assert block.startswith("data: "), block
            events.append(json.loads(block[len("data: "):]))
    return events


def test_health_and_identity():
    async def main():
        runner, base = await started(demo_tone_synthesizer())
        try:
            async with aiohttp.ClientSession() as s:
                async with s.get(base + "/health") as r:
                    assert r.status == 200
                    assert (await r.json())["status"] == "ok"
                async with s.get(base + "/identity") as r:
                    assert r.status == 200 and await r.json() == IDENTITY
        finally:
            await runner.cleanup()

    run(main())


@pytest.mark.parametrize(
    "body, field",
    [
        ({"text": "   "}, "text"),
        ({"text": 5}, "text"),
        ({"text": "x" * 4097}, "text"),
        ({"text": "hi", "seed": "7"}, "seed"),
        ({"text": "hi", "seed": True}, "seed"),
        ({"text": "hi", "seed": -1}, "seed"),
        ({"text": "hi", "voice": 3}, "voice"),
        ({"text": "hi", "language": ["en"]}, "language"),
        ({"text": "hi", "instruct": {}}, "instruct"),
        ({"text": "hi", "speed": 2}, "speed"),
    ],
)
def test_validation_names_the_field(body, field):
    """The own protocol (a body with "text") keeps its own error shape {"error": "<field>: why", "field"}."""
    calls = []

    async def main():
        runner, base = await started(lambda req: calls.append(req) or (np.zeros(10, np.float32), 8000))
        try:
            async with aiohttp.ClientSession() as s:
                async with s.post(base + "/v1/audio/speech", json=body) as r:
                    assert r.status == 400
                    data = await r.json()
        finally:
            await runner.cleanup()
        return data

    data = run(main())
    assert data["field"] == field and data["error"].startswith(field)
    assert calls == []  # invalid requests never reach the model


def test_sse_format_chunks_and_done_event():
    wave = np.array([0.0, 0.25, -0.25, 1.0, -1.0, 3.0, -3.0], dtype=np.float32)
    expected = np.array([0, 8192, -8192, 32767, -32767, 32767, -32767], dtype="<i2").tobytes()  # 0.25*32767=8191.75
    seen = []

    def synth(req):
        seen.append(req)
        return wave, 16000

    async def main():
        runner, base = await started(synth, chunk_samples=3)
        try:
            async with aiohttp.ClientSession() as s:
                body = {"text": "hello", "voice": "Ryan", "language": "English", "seed": 3, "instruct": "calm",
                        "model": "label"}
                async with s.post(base + "/v1/audio/speech", json=body, headers={"X-Request-Id": "c1-r0"}) as r:
                    assert r.status == 200
                    assert r.content_type == "text/event-stream"
                    return await r.read()
        finally:
            await runner.cleanup()

    events = parse_sse(run(main()))
    audio, done = events[:-1], events[-1]
    assert [e["type"] for e in audio] == ["audio"] * 3 and [e["index"] for e in audio] == [0, 1, 2]
    chunks = [base64.b64decode(e["pcm"]) for e in audio]
    assert [len(c) for c in chunks] == [6, 6, 2]  # 3 samples per event, int16
    assert all(e["sample_rate"] == 16000 for e in audio)
    assert b"".join(chunks) == expected
    assert done["type"] == "done" and done["streaming"] is False and "non-streaming" in done["note"]
    assert done["samples"] == 7 and done["sample_rate"] == 16000
    assert done["audio_seconds"] == pytest.approx(7 / 16000)
    assert done["pcm_sha256"] == hashlib.sha256(expected).hexdigest()
    assert seen == [{"text": "hello", "voice": "Ryan", "language": "English", "seed": 3, "instruct": "calm",
                     "id": "c1-r0"}]


def test_busy_503_when_queue_full_and_queued_requests_still_served():
    release, running = threading.Event(), threading.Event()

    def slow(req):
        running.set()
        assert release.wait(10)
        return np.full(100, 0.1, np.float32), 8000

    async def main():
        runner, base = await started(slow, queue_size=1)
        try:
            async with aiohttp.ClientSession() as s:
                url = base + "/v1/audio/speech"
                first = asyncio.create_task(s.post(url, json={"text": "one"}))
                assert await asyncio.to_thread(running.wait, 5)  # the model thread holds request one
                second = asyncio.create_task(s.post(url, json={"text": "two"}))
                for _ in range(200):  # until request two waits in the queue
                    async with s.get(base + "/health") as h:
                        if (await h.json())["queued"] == 1:
                            break
                    await asyncio.sleep(0.01)
                else:
                    raise AssertionError("request two never queued")
                async with s.post(url, json={"text": "three"}) as r:
                    busy = (r.status, await r.json(), r.headers.get("Retry-After"))
                release.set()
                bodies = []
                for task in (first, second):
                    resp = await task
                    bodies.append((resp.status, parse_sse(await resp.read())[-1]["type"]))
                    resp.release()
                async with s.get(base + "/health") as h:
                    health = await h.json()
                return busy, bodies, health
        finally:
            release.set()
            await runner.cleanup()

    busy, bodies, health = run(main())
    assert busy == (503, {"error": "busy"}, "1")  # the own shape, and when to retry
    assert bodies == [(200, "done"), (200, "done")]
    assert health["busy_rejections"] == 1 and health["served"] == 2


def test_synthesis_error_is_500_and_worker_survives():
    def flaky(req):
        if req["text"] == "boom":
            raise RuntimeError("model exploded")
        if req["text"] == "nan":
            return np.array([np.nan], np.float32), 8000
        if req["text"] == "2d":
            return np.zeros((2, 2), np.float32), 8000
        return np.full(10, 0.5, np.float32), 8000

    async def main():
        runner, base = await started(flaky)
        out = []
        try:
            async with aiohttp.ClientSession() as s:
                for text in ("boom", "nan", "2d", "fine"):
                    async with s.post(base + "/v1/audio/speech", json={"text": text}) as r:
                        out.append((r.status, await r.read()))
        finally:
            await runner.cleanup()
        return out

    (s1, b1), (s2, b2), (s3, b3), (s4, b4) = run(main())
    assert s1 == 500 and "model exploded" in json.loads(b1)["error"]
    assert s2 == 500 and "non-finite" in json.loads(b2)["error"]
    assert s3 == 500 and "2-D" in json.loads(b3)["error"]
    assert s4 == 200 and parse_sse(b4)[-1]["type"] == "done"


def test_loopback_only():
    assert check_loopback("127.0.0.1") == "127.0.0.1"
    assert check_loopback("::1") == "::1"
    assert check_loopback("localhost") == "127.0.0.1"
    for host in ("0.0.0.0", "10.1.2.3", "example.com", "::"):
        with pytest.raises(S2STError, match="loopback"):
            check_loopback(host)
    with pytest.raises(S2STError, match="loopback"):
        run_server(demo_tone_synthesizer(), host="0.0.0.0", port=0, identity={})


def test_pipeline_synthesizer_chains_stages():
    calls = []

    class Stage:
        def __init__(self, name, fn):
            self.name, self.fn = name, fn

        def forward(self, x):
            calls.append((self.name, x))
            return self.fn(x)

        def to_next_input(self, out):
            return {"bridged": out}

    class Pipe:
        model_type = "fake"
        stages = [Stage("a", lambda x: len(x["text"])),
                  Stage("b", lambda x: {"waveform": [0.1] * x["bridged"], "sample_rate": 1000})]

        def prepare_sample(self, sample):
            calls.append(("prepare", sample))
            return sample

    wave, sr = pipeline_synthesizer(Pipe())({"text": "abcd", "voice": "v", "seed": 1, "id": "c1-r0"})
    assert sr == 1000 and wave.dtype == np.float32 and wave.shape == (4,)
    assert calls[0] == ("prepare", {"text": "abcd", "language": None, "voice": "v", "seed": 1, "id": "c1-r0"})
    assert calls[2] == ("b", {"bridged": 4})

    class Bad(Pipe):
        stages = [Stage("only", lambda x: {"text": "not speech"})]

    with pytest.raises(ValueError, match="waveform"):
        pipeline_synthesizer(Bad())({"text": "x"})


@contextlib.contextmanager
def _serving(args: list[str], ident: Path):
    """s2st-serve ARGS on a free port: (process, identity JSON); killed at the end if still running."""
    proc = subprocess.Popen([sys.executable, "-m", "pytest_s2st.cli.serve", *args, "--port", "0",
                             "--identity-output", str(ident)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        yield proc, _wait_for_file(ident, proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _wait_for_file(path: Path, proc: subprocess.Popen, timeout: float = 20.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            return json.loads(path.read_text())
        if proc.poll() is not None:
            raise AssertionError(f"server exited early: {proc.stderr.read()}")
        time.sleep(0.05)
    raise AssertionError("identity file never appeared")


def _post_once(endpoint: str) -> tuple[int, list[dict]]:
    async def main():
        async with aiohttp.ClientSession() as s:
            async with s.get(endpoint.rsplit("/v1/", 1)[0] + "/health") as h:
                assert h.status == 200
            async with s.post(endpoint, json={"text": "abc", "seed": 1}) as r:
                return r.status, parse_sse(await r.read())

    return run(main())


@pytest.mark.parametrize("mode", ["demo-tone", "config"])
def test_cli_serves_writes_identity_and_stops_on_sigterm(tmp_path, mode):
    ident = tmp_path / "identity.json"
    args = ["--demo-tone"]
    if mode == "config":
        (tmp_path / "tone.py").write_text(textwrap.dedent("""
            import numpy as np
            def make():
                return lambda sample: {"waveform": np.full(len(sample["text"]) * 100, 0.2, np.float32),
                                       "sample_rate": 8000}
        """))
        cfg = tmp_path / "tts.yaml"
        cfg.write_text("general:\n  model_type: callable\nstage1:\n  entry: tone.py:make\n")
        args = ["--s2st-config", str(cfg)]
    with _serving([*args, "--queue-size", "3"], ident) as (proc, identity):
        assert identity["host"] == "127.0.0.1" and identity["port"] > 0 and identity["queue_size"] == 3
        assert identity["code"]["package"] == "pytest-s2st" and len(identity["code"]["server_module_sha256"]) == 64
        status, events = _post_once(identity["endpoint"])
        assert status == 200 and events[-1]["type"] == "done"
        if mode == "config":
            assert identity["model_type"] == "callable"
            assert identity["config"]["sha256"] == hashlib.sha256((tmp_path / "tts.yaml").read_bytes()).hexdigest()
            assert events[-1]["samples"] == 300 and events[-1]["sample_rate"] == 8000
            assert any(p.endswith("tone.py") for p in identity["assets"])
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0


def test_cli_serves_the_case_pytest_resolved(tmp_path):
    """--case: the server builds what the case JSON says (overrides included) and never re-reads the YAML."""
    from helpers import write_tone_case
    from pytest_s2st.cases import load_case

    cfg = write_tone_case(tmp_path, name="yaml-name", model_type="TTS")  # as written: a fairseq type
    case = load_case(cfg, {"model_type": "callable", "concurrency": (1, 4)}, lambda name: None)  # --s2st-model-type
    case.settings["threads"] = 2
    data = case.to_dict()
    data["case_id"] = "callable-overridden"
    data["general"]["name"] = "overridden"
    case_json = tmp_path / "case.json"
    case_json.write_text(json.dumps(data))
    cfg.write_text("general: {model_type: S2T}\n")  # what a re-read would see: a type that cannot serve speech
    ident = tmp_path / "identity.json"
    with _serving(["--case", str(case_json)], ident) as (proc, identity):
        assert identity["case_id"] == "callable-overridden" and identity["model_type"] == "callable"
        assert identity["settings"]["threads"] == 2 and identity["settings"]["concurrency"] == [1, 4]
        assert identity["settings"]["device"] == "cpu" and identity["device"]["name"] == "cpu"
        assert identity["config"]["path"] == str(cfg)
        # the served model is the config's name (general.name), not the case id (issue 32 item 7)
        import urllib.request

        base = f"http://{identity['host']}:{identity['port']}"
        with urllib.request.urlopen(f"{base}/v1/models", timeout=10) as r:
            assert [m["id"] for m in json.loads(r.read())["data"]] == ["overridden"]
        status, events = _post_once(identity["endpoint"])
        assert status == 200 and events[-1]["samples"] == 300 and events[-1]["sample_rate"] == 8000
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0


@pytest.mark.parametrize("content, why", [
    ("{not json", "cannot read the case JSON"),
    ('{"path": "x.yaml"}', "not a case written by Case.to_dict: KeyError"),
])
def test_cli_bad_case_json_is_one_line(tmp_path, content, why):
    case_json = tmp_path / "case.json"
    case_json.write_text(content)
    out = subprocess.run([sys.executable, "-m", "pytest_s2st.cli.serve", "--case", str(case_json), "--port", "0"],
                         capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0, out.stderr
    assert f"{case_json}: {why}" in out.stderr


def test_cli_config_and_case_are_exclusive(tmp_path):
    out = subprocess.run([sys.executable, "-m", "pytest_s2st.cli.serve", "--case", "c.json", "--s2st-config", "c.yaml",
                          "--port", "0"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "not allowed with argument" in out.stderr


def test_cli_refuses_non_loopback_in_one_line():
    out = subprocess.run([sys.executable, "-m", "pytest_s2st.cli.serve", "--demo-tone", "--port", "0",
                          "--host", "0.0.0.0"], capture_output=True, text=True, timeout=30,
                         env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and "loopback" in out.stderr


@pytest.mark.parametrize("model_type, extra, why", [
    ("S2T", "", "model_type S2T takes speech features or gives text"),
    ("callable", "  serves_speech: false\n", "general.serves_speech is false"),
])
def test_cli_refuses_a_case_that_cannot_serve_speech_in_one_line(tmp_path, model_type, extra, why):
    """Refused at start, before any model is loaded, instead of answering every request with HTTP 500."""
    cfg = tmp_path / "case.yaml"
    cfg.write_text(f"general:\n  model_type: {model_type}\n{extra}stage1:\n  entry: absent.py:make\n  path: absent.pt\n")
    out = subprocess.run([sys.executable, "-m", "pytest_s2st.cli.serve", "--s2st-config", str(cfg), "--port", "0"],
                         capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0, out.stderr
    assert f"{cfg}: does not serve speech from text ({why})" in out.stderr


def test_client_that_gives_up_while_queued_costs_no_model_time():
    release, running = threading.Event(), threading.Event()
    texts = []

    def slow(req):
        texts.append(req["text"])
        running.set()
        assert release.wait(10)
        return np.full(100, 0.1, np.float32), 8000

    async def main():
        runner, base = await started(slow, queue_size=2)
        try:
            url = base + "/v1/audio/speech"
            async with aiohttp.ClientSession() as s:
                first = asyncio.create_task(s.post(url, json={"text": "one"}))
                assert await asyncio.to_thread(running.wait, 5)
                async with aiohttp.ClientSession() as impatient:  # its own connection, closed below
                    gone = asyncio.create_task(impatient.post(url, json={"text": "abandoned"}))
                    for _ in range(200):
                        async with s.get(base + "/health") as h:
                            if (await h.json())["queued"] == 1:
                                break
                        await asyncio.sleep(0.01)
                    gone.cancel()
                await asyncio.sleep(0.2)  # the server notices the closed connection
                release.set()
                resp = await first
                await resp.read()
                async with s.post(url, json={"text": "three"}) as r:
                    await r.read()
                    return r.status
        finally:
            release.set()
            await runner.cleanup()

    assert run(main()) == 200
    assert texts == ["one", "three"]


def test_failure_after_streaming_started_is_an_sse_error_event(monkeypatch):
    from pytest_s2st.service import answers

    real = answers.sse_event

    def failing_done(payload):
        if payload["type"] == "done":
            raise RuntimeError("hash unit on fire")
        return real(payload)

    monkeypatch.setattr(answers, "sse_event", failing_done)

    async def main():
        runner, base = await started(lambda req: (np.full(10, 0.5, np.float32), 8000))
        try:
            async with aiohttp.ClientSession() as s:
                async with s.post(base + "/v1/audio/speech", json={"text": "x"}) as r:
                    return r.status, await r.read()
        finally:
            await runner.cleanup()

    status, raw = run(main())
    events = parse_sse(raw)
    assert status == 200 and [e["type"] for e in events] == ["audio", "error"]
    assert "hash unit on fire" in events[-1]["message"]


def test_streaming_failure_after_the_first_chunk_is_told_in_band_where_the_protocol_can():
    """The model dies after its first chunk went out: own SSE and OpenAI SSE end with an error event, raw PCM
    (no place for one) just ends after the audio sent; each counts as failed, none as served."""
    def stream(req, emit):
        emit(np.full(10, 0.5, np.float32), 8000)
        raise RuntimeError("decoder died")

    async def main():
        runner, base = await started(lambda req: (np.zeros(1, np.float32), 8000), stream=stream)
        out = []
        try:
            async with aiohttp.ClientSession() as s:
                for body in ({"text": "x"}, {"input": "x", "stream_format": "sse", "response_format": "pcm"},
                             {"input": "x", "stream_format": "audio", "response_format": "pcm"}):
                    async with s.post(base + "/v1/audio/speech", json=body) as r:
                        out.append((r.status, await r.read()))
                async with s.get(base + "/health") as r:
                    health = await r.json()
        finally:
            await runner.cleanup()
        return out, health

    (own, openai_sse, raw), health = run(main())
    assert own[0] == 200 and [e["type"] for e in parse_sse(own[1])] == ["audio", "error"]
    assert parse_sse(own[1])[-1]["message"] == "RuntimeError: decoder died"
    assert openai_sse[0] == 200 and [e["type"] for e in parse_sse(openai_sse[1])] == ["speech.audio.delta", "error"]
    assert parse_sse(openai_sse[1])[-1]["message"] == "RuntimeError: decoder died"
    pcm = np.full(10, 16384, "<i2").tobytes()  # 0.5 of full scale (2**15), as to_pcm16 writes it
    assert raw == (200, pcm)
    assert (health["failed"], health["served"]) == (3, 0)


def test_the_identity_hash_covers_every_module_the_server_runs():
    """The server's identity hashed server.py alone; the routes, answers and the model thread live in several modules
    now: every service module the server imports (transitively, read by ast) is in the hash."""
    import ast
    from pathlib import Path

    from pytest_s2st.cli.serve import SERVING_MODULES

    folder = Path(__file__).resolve().parent.parent / "pytest_s2st" / "service"
    seen, todo = set(), ["server"]
    while todo:
        name = todo.pop()
        if name in seen or not (folder / f"{name}.py").exists():
            continue
        seen.add(name)
        for node in ast.walk(ast.parse((folder / f"{name}.py").read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                todo += [node.module.split(".")[0]] if node.module else [a.name for a in node.names]
    assert len(seen) >= 5 and seen <= set(SERVING_MODULES), sorted(seen - set(SERVING_MODULES))
