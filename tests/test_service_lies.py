"""Lies a server can tell (tests/hostile.py's lying modes): answers that look like good audio and are not.

Each lie is either refused, the request's reason naming what the server lied about (so the level is
INCONCLUSIVE, not a pass), or read right (the rate asked for when the answer names none, audio/L16 swapped
to little-endian, a connection with bytes waiting on it dropped before it carries a request). Through
run_load over both transports (http1.py and aiohttp's client), and through the path users run: pytest
with the plugin against ``--s2st-endpoint`` (docs/service.md, the table "Lies a server can tell", is
checked against these reasons)."""
from __future__ import annotations

import asyncio
import hashlib
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from hostile import MAX_EVENT, PCM, PRESEND_DELAY_S, RATE, hostile, max_event_pcm, tone
from pytest_s2st import runs
from pytest_s2st.service import arrivals, http1
from pytest_s2st.service.client import run_load
from pytest_s2st.service.readers.raw_pcm import media_type, pcm_format

WORKLOAD = [{"id": "a", "text": "hello there", "language": "English", "voice": "Ryan", "seed": 1}]
TRANSPORTS = ("http1", "aiohttp")
HOSTILE = Path(__file__).with_name("hostile.py")
DOCS = Path(__file__).parents[1] / "docs" / "service.md"
OPENAI = {"protocol": "openai", "extra_body": {"model": "m"}}
SSE = {"protocol": "openai", "extra_body": {"model": "m", "stream_format": "sse"}}
ASK_16K = {"protocol": "openai", "extra_body": {"model": "m", "sample_rate": 16000}}
# one request a second, evenly: > PRESEND_DELAY_S
OPEN_LOOP = {"arrival": arrivals.Gamma(rate=1.0, burstiness=float("inf"))}


def load(tmp_path, mode: str, transport: str = "http1", bound: float = 30.0, **kw):
    kw = {"warmups": 0, "requests": 2, "timeout_s": 5.0, "sample_rate": RATE, "protocol": "s2st", **kw}

    async def main():
        async with hostile(mode) as server:
            t = time.perf_counter()
            result = await run_load(server.url, WORKLOAD, kw.pop("concurrency", 1), out_dir=tmp_path,
                                    transport=transport, **kw)
            return result, time.perf_counter() - t

    result, took = asyncio.run(asyncio.wait_for(main(), bound + 10))
    assert took < bound, f"run took {took:.1f} s"
    assert runs.read_records(tmp_path) == result.records
    return result


def wav_pcm(out_dir: Path, rid: str) -> tuple[int, bytes]:
    """(rate, PCM) of a request's evidence WAV."""
    data = runs.wav_path(out_dir, rid).read_bytes()
    assert data[:4] == b"RIFF" and data[36:40] == b"data"
    return int.from_bytes(data[24:28], "little"), data[44:]


def ttfa(record: dict) -> float:
    return record["first_audio_t"] - record["send_t"]


# --- refused: the reason names the lie ---------------------------------------------------------------------

# (mode, run_load options, the reason each request records); the docs' table lists the same reasons
REFUSED = [
    ("nul_encoding", OPENAI, "Content-Encoding\\x00"),
    ("nul_encoding", {}, "Content-Encoding\\x00"),
    ("stereo", OPENAI, "2 channels; the client reads mono PCM only (channels=1)"),
    ("done_rate", {}, "done event says sample_rate 16000, its audio events 24000"),
    ("wav_as_pcm", OPENAI, "the audio begins with a RIFF/WAVE header: a WAV file sent as audio/pcm"),
    ("wav_as_pcm", SSE, "the audio begins with a RIFF/WAVE header: a WAV file sent as text/event-stream"),
    ("wav_as_f32", OPENAI, "the audio begins with a RIFF/WAVE header: a WAV file sent as audio/x-raw"),
    ("wav_ext_float", OPENAI, "WAVE_FORMAT_EXTENSIBLE SubFormat 00000003-0000-0010-8000-00aa00389b71 (IEEE float)"),
]


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("mode, options, reason", REFUSED, ids=[f"{m}-{o.get('protocol', 's2st')}{'-sse' if o is SSE else ''}"
                                                                for m, o, _ in REFUSED])
def test_a_lie_is_refused_naming_it(tmp_path, mode, options, reason, transport):
    result = load(tmp_path, mode, transport, **options)
    for r in result.records:
        assert r["status"] == "error" and reason in r["error"], r["error"]
        assert r["audio_seconds"] is None and r["pcm_sha256"] is None
        assert not runs.wav_path(tmp_path, r["id"]).exists()
    assert result.summary["error_rate"] == 1.0


# --- read right --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("mode, options", [("pcm_no_rate", ASK_16K),
                                           ("sse_no_rate", {**SSE, "extra_body": {**SSE["extra_body"], "sample_rate": 16000}})])
def test_an_answer_naming_no_rate_is_read_at_the_rate_asked(tmp_path, mode, options, transport):
    """vLLM-Omni 0.30 answers a request for 16 kHz with audio/pcm (and SSE deltas) naming no rate: 0.5 s
    of 16 kHz audio (16,000 bytes) used to be read at the run's 24 kHz as 0.333 s."""
    result = load(tmp_path, mode, transport, **options)
    for r in result.records:
        assert r["status"] == "ok", r["error"]
        assert (r["sample_rate"], r["audio_seconds"]) == (16000, 0.5)
        assert wav_pcm(tmp_path, r["id"]) == (16000, tone(0.5, 16000))
    assert runs.read_summary(tmp_path)["by_concurrency"]["1"]["sample_rate"] == 16000


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_l16_is_big_endian_and_swapped(tmp_path, transport):
    """RFC 2586's audio/L16 is network byte order: the evidence holds the samples, not their byte swap (the
    server's pieces are 4,097 bytes: samples split across pieces)."""
    result = load(tmp_path, "l16", transport, **OPENAI)
    for r in result.records:
        assert r["status"] == "ok", r["error"]
        assert r["audio_seconds"] == 0.5
        assert wav_pcm(tmp_path, r["id"]) == (RATE, tone(0.5, RATE))


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("mode, options", [("float_raw", OPENAI), ("wav_ext_pcm", OPENAI), ("sse_bom", SSE),
                                           ("sse_bom", {}), ("sse_cr", SSE), ("sse_cr", {})])
def test_legal_audio_shapes_read_as_the_samples_sent(tmp_path, mode, options, transport):
    """0.5 s sent each way, byte for byte in the evidence: float32 raw PCM declared format=F32LE (was read as
    int16: 1.0 s), a WAVE_FORMAT_EXTENSIBLE whose SubFormat is PCM, an SSE stream opening with a UTF-8 BOM
    (its first event was dropped: 0.4 s) and one with CR-only line ends (refused), on both protocols."""
    result = load(tmp_path, mode, transport, **options)
    for r in result.records:
        assert r["status"] == "ok", r["error"]
        assert r["audio_seconds"] == 0.5
        assert wav_pcm(tmp_path, r["id"]) == (RATE, tone(0.5, RATE))


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("protocol", [{}, OPENAI])
def test_an_answer_sent_before_the_request_is_not_its_answer(tmp_path, transport, protocol):
    """Every answer takes 0.3 s, then the server sends it once more, unasked. Open loop, one request a
    second: the next request used to 'receive' the copy waiting on the kept-alive connection (TTFA 176 us).
    A connection that is not quiet is dropped before it carries a request: every TTFA is a real one; over
    http1 the level also names what came unasked (bench.evidence_reasons: INCONCLUSIVE), one line a connection."""
    result = load(tmp_path, "presend", transport, requests=4, **OPEN_LOOP, **protocol)
    assert [r["status"] for r in result.records] == ["ok"] * 4, [r["error"] for r in result.records]
    assert min(ttfa(r) for r in result.records) >= PRESEND_DELAY_S
    if transport == "http1":
        assert [line.split(" after the answer to ")[1][:5] for line in result.unasked] == \
            ["c1-r0", "c1-r1", "c1-r2", "c1-r3"], result.unasked


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_closed_loop_an_answer_naming_another_request_is_refused(tmp_path, transport):
    """Closed loop, the next request leaves at once, before the copy arrives: HTTP/1.1 cannot tell the copy
    from its answer, but the server names the request it answers (X-Request-Id): such an answer is refused.
    No request is ever recorded with the copy's TTFA."""
    result = load(tmp_path, "presend", transport, requests=4, **OPENAI)
    ok = [r for r in result.records if r["status"] == "ok"]
    assert ok and min(ttfa(r) for r in ok) >= PRESEND_DELAY_S
    for r in result.records:
        if r["status"] != "ok":
            assert re.fullmatch(r"the answer names X-Request-Id 'c1-r\d': it answers that request, not this one "
                                r"\(the server sent one answer more than asked\)", r["error"]), r["error"]


@pytest.mark.parametrize("protocol", [{}, OPENAI])
def test_closed_loop_answers_sent_unasked_and_unnamed_make_the_level_refused(tmp_path, protocol):
    """As above, but the answers name no request (most servers): each next request leaves before the copy
    arrives and reads it as its own (TTFA 20 ms where the server takes 300). Nothing on the wire tells the
    copy from an answer, but the copies leave the connection one answer ahead: after the measured phase the
    kept connection is watched (1.5x the slowest answer) and what comes is named; the level is refused."""
    from pytest_s2st.service.bench import evidence_reasons

    result = load(tmp_path, "presend_anon", "http1", requests=4, **protocol)
    assert len(result.unasked) == 1, result.unasked
    assert re.fullmatch(r"\d+ bytes nobody asked for came on a kept-alive connection after the answer to c1-r3: the "
                        r"server sent more answers than requests, so which answer was whose cannot be told",
                        result.unasked[0]), result.unasked
    assert runs.read_summary(tmp_path)["by_concurrency"]["1"]["unasked"] == result.unasked
    data = {"summary": result.summary, "unasked": result.unasked, "failed": []}
    assert evidence_reasons(data) == result.unasked


def test_an_honest_server_leaves_nothing_unasked(tmp_path):
    result = load(tmp_path, "ok", "http1", requests=3, protocol="openai", extra_body={"model": "m"})
    assert [r["status"] for r in result.records] == ["ok"] * 3
    assert result.unasked == [] and runs.read_summary(tmp_path)["by_concurrency"]["1"]["unasked"] == []


# --- legal maximum answers, every wire format ---------------------------------------------------------------

@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("mode, options", [("max_events", {}), ("max_events", OPENAI), ("max_raw", OPENAI),
                                           ("max_wav", OPENAI)],
                         ids=["own-sse", "openai-sse", "raw-pcm", "wav"])
def test_legal_maximum_answers_complete_in_every_wire_format(tmp_path, mode, options, transport):
    """Two 16 MiB events of audio (~524 s at 24 kHz) per answer, at c4; the same audio as raw PCM and a WAV
    (c64: docs/records/service.md)."""
    result = load(tmp_path, mode, transport, concurrency=4, requests=4, timeout_s=60.0, bound=120.0, **options)
    pcm = max_event_pcm()
    assert len(pcm) * 4 // 3 > MAX_EVENT - 8192  # the events are at the bound
    for r in result.records:
        assert r["status"] == "ok", r["error"]
        assert r["audio_seconds"] == len(pcm) / RATE  # 2 x len(pcm) bytes of int16
        runs.wav_path(tmp_path, r["id"]).unlink()


# --- the parsers the lies went through, fuzzed ------------------------------------------------------------

class _NoWriter:
    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def get_extra_info(self, name: str):
        return None


def _parse_head(raw: bytes):
    async def main():
        reader = asyncio.StreamReader()
        reader.feed_data(raw)
        reader.feed_eof()
        return await http1.Connection(reader, _NoWriter()).response(1.0)  # type: ignore[arg-type]
    return asyncio.run(main())


_TCHARS = "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


@pytest.mark.parametrize("line, why", [
    (b"Content-Encoding\0: gzip", "malformed header name b'Content-Encoding\\x00' (not an HTTP token)"),
    (b"Content Encoding: gzip", "not an HTTP token"),
    (b"Content-Encoding\x85: gzip", "not an HTTP token"),
    (b"Content-Type: audio/pcm\0x", "header 'Content-Type': its value holds NUL, CR or LF"),
    (b"Content-Type: audio/pcm\nContent-Encoding: gzip", "its value holds NUL, CR or LF"),
])
def test_a_header_line_curl_refuses_is_refused(line, why):
    with pytest.raises(http1.ProtocolError) as exc:
        _parse_head(b"HTTP/1.1 200 OK\r\n" + line + b"\r\nContent-Length: 0\r\n\r\n")
    assert why in str(exc.value) and "\n" not in str(exc.value)


def test_whitespace_before_the_colon_is_tolerated_as_proxies_remove_it():
    resp = _parse_head(b"HTTP/1.1 200 OK\r\nContent-Encoding : gzip\r\nContent-Length: 0\r\n\r\n")
    assert resp.headers["content-encoding"] == "gzip"


@settings(max_examples=300, deadline=None)
@given(name=st.binary(min_size=1, max_size=20), value=st.binary(max_size=30))
def test_fuzz_header_lines_are_tokens_and_clean_values_or_refused(name, value):
    """Any header line: refused in one line, or a name of token characters and a value without NUL/CR/LF."""
    try:
        resp = _parse_head(b"HTTP/1.1 200 OK\r\n" + name + b":" + value + b"\r\nContent-Length: 0\r\n\r\n")
    except http1.ProtocolError as exc:
        assert "\n" not in str(exc)
        return
    for key, text in resp.headers.items():
        assert key and all(c in _TCHARS for c in key), key
        assert not set(text) & set("\0\r\n"), text


_token = st.text(alphabet=_TCHARS, min_size=1, max_size=12)
_quoted_text = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=12)


@settings(max_examples=300, deadline=None)
@given(params=st.dictionaries(_token.map(str.lower), _token | _quoted_text, max_size=4),
       quote=st.booleans(), space=st.sampled_from(["", " ", "\t "]))
def test_fuzz_media_type_parameters_round_trip(params, quote, space):
    """A Content-Type written by RFC 9110's grammar (token or quoted values, any case, optional spaces) is
    read back to the same parameters."""
    def written(v: str) -> str:
        if quote or not v or any(c not in _TCHARS for c in v):
            return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
        return v
    text = "Audio/PCM" + "".join(f"{space};{space}{k.upper() if quote else k}={written(v)}" for k, v in params.items())
    assert media_type(text) == ("audio/pcm", params)


@settings(max_examples=500, deadline=None)
@given(text=st.text(max_size=80) | st.builds(lambda a, b: f"audio/pcm;{a}={b}", st.text(max_size=10),
                                            st.text(max_size=10)))
def test_fuzz_pcm_format_reads_or_refuses_in_one_line(text):
    try:
        rate, sample = pcm_format(text)
    except ValueError as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    assert rate is None or 0 < rate <= 384_000
    assert (sample == "S16BE") == (media_type(text)[0] == "audio/l16" or media_type(text)[1].get("format",
                                                                                                    "").upper() == "S16BE")


@pytest.mark.parametrize("ctype, read", [
    ("audio/pcm", (None, "S16LE")), ("audio/L16;rate=16000", (16000, "S16BE")),
    ('audio/pcm; rate="8000"', (8000, "S16LE")), ("audio/pcm;rate=24000;channels=1", (24000, "S16LE")),
    ("audio/pcm;;", (None, "S16LE")), ("audio/x-raw;format=F32LE;rate=24000", (24000, "F32LE")),
    ("audio/x-raw;format=s16be", (None, "S16BE")),
])
def test_pcm_format(ctype, read):
    assert pcm_format(ctype) == read


@pytest.mark.parametrize("ctype, why", [
    ("audio/pcm;rate=24000;channels=2", "2 channels"), ("audio/pcm;rate=1;rate=2", "names rate twice"),
    ("audio/pcm;rate=1;sample_rate=1", "names its rate twice"), ("audio/pcm;rate", "malformed parameter"),
    ("audio/pcm;rate=0", "is not in 1-384000"), ("audio/pcm;" + "x" * 2000, "at most 1024"),
    ("audio/x-raw;format=S24LE", "format 'S24LE' is not read"), ("audio/L16;format=F32LE", "audio/L16 is S16BE"),
])
def test_pcm_format_refused(ctype, why):
    with pytest.raises(ValueError, match=re.escape(why)):
        pcm_format(ctype)


def test_an_extra_body_asking_for_no_rate_is_a_usage_error(tmp_path):
    with pytest.raises(Exception, match=re.escape("extra body: sample_rate '16k' is not an integer in 1-384000")):
        asyncio.run(run_load("http://127.0.0.1:9", WORKLOAD, 1, out_dir=tmp_path / "run", protocol="openai",
                             extra_body={"sample_rate": "16k"}))
    assert not (tmp_path / "run").exists()


# --- through pytest: one hostile server, an endpoint per lie ---------------------------------------------

SERVICE_TEST = '''
import json, os

def test_service(s2st_service, s2st_workload, s2st_concurrency, s2st_load):
    result = s2st_load(s2st_service, s2st_workload, concurrency=s2st_concurrency)
    with open(os.environ["S2ST_LIES_OUT"], "w") as fh:
        json.dump([{k: r[k] for k in ("status", "error", "audio_seconds", "pcm_sha256", "send_t", "first_audio_t")}
                   for r in result.measured], fh)
'''


@pytest.fixture(scope="module")
def liar(tmp_path_factory):
    """tests/hostile.py in its own process, mode by_path: POST /<mode>/... is that mode's answer."""
    port_file = tmp_path_factory.mktemp("liar") / "port"
    server = subprocess.Popen([sys.executable, str(HOSTILE), "by_path", str(port_file)])
    try:
        deadline = time.monotonic() + 60
        while not port_file.exists():
            assert server.poll() is None and time.monotonic() < deadline, "server did not start"
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port_file.read_text()}"
    finally:
        server.kill()
        server.wait()


UNASKED = "bytes nobody asked for came on a kept-alive connection"
OPENAI_FLAGS = ("--s2st-protocol=openai", '--s2st-extra-body={"model": "m"}')
PYTEST_PATH = [  # (mode, flags, outcome, what each request recorded: its reason, or (audio seconds, its PCM))
    ("nul_encoding", OPENAI_FLAGS, "inconclusive", "response broken: malformed header name b'Content-Encoding\\x00'"),
    ("stereo", OPENAI_FLAGS, "inconclusive", "2 channels; the client reads mono"),
    ("done_rate", (), "inconclusive", "done event says sample_rate 16000, its audio events 24000"),
    ("wav_as_pcm", OPENAI_FLAGS, "inconclusive", "the audio begins with a RIFF/WAVE header"),
    ("pcm_no_rate", ("--s2st-protocol=openai", '--s2st-extra-body={"model": "m", "sample_rate": 16000}'), "passed",
     (0.5, tone(0.5, 16000))),
    ("l16", OPENAI_FLAGS, "passed", (0.5, tone(0.5, RATE))),
    ("presend", ("--s2st-request-rate=1", "--s2st-burstiness=inf"), "inconclusive", UNASKED),
    ("presend_anon", OPENAI_FLAGS, "inconclusive", UNASKED),
]


@pytest.mark.parametrize("mode, flags, outcome, recorded", PYTEST_PATH, ids=[p[0] for p in PYTEST_PATH])
def test_through_pytest_a_lie_is_inconclusive_or_read_right(pytester, monkeypatch, liar, mode, flags, outcome,
                                                            recorded):
    pytester.makepyfile(test_service=SERVICE_TEST)
    out = pytester.path / "records.json"
    monkeypatch.setenv("S2ST_LIES_OUT", str(out))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--s2st-endpoint={liar}/{mode}/v1/audio/speech",
                                           "--s2st-concurrency=1", "--s2st-requests=3", "--s2st-warmup=0",
                                           "--s2st-request-timeout=5", "--s2st-evidence-dir=ev", *flags)
    assert result.parseoutcomes() == {outcome: 1}, result.stdout.str()[-3000:]
    records = json.loads(out.read_text())
    assert len(records) == 3
    if recorded == UNASKED:  # every answer read whole; the level is refused as a whole, named
        assert all(r["status"] == "ok" and r["pcm_sha256"] == hashlib.sha256(PCM).hexdigest() for r in records)
        result.stdout.fnmatch_lines([f"*{recorded} after the answer to c1-r*"])
    elif outcome == "inconclusive":
        assert all(r["status"] == "error" and recorded in r["error"] for r in records), records
        result.stdout.fnmatch_lines([f"*c1-r0: request failed: *{recorded}*"])
    else:
        seconds, pcm = recorded
        assert all(r["status"] == "ok" and r["audio_seconds"] == seconds for r in records), records
        assert {r["pcm_sha256"] for r in records} == {hashlib.sha256(pcm).hexdigest()}
    if mode == "presend":
        assert min(r["first_audio_t"] - r["send_t"] for r in records) >= PRESEND_DELAY_S


# --- the docs' table is these tests' ----------------------------------------------------------------------

def test_the_docs_table_names_the_reasons_recorded():
    """docs/service.md's table "Lies a server can tell" quotes what the client records: every reason a
    refused lie is tested with here is quoted in it."""
    lines = DOCS.read_text().split("Lies a server can tell", 1)[1].splitlines()
    first = next(i for i, line in enumerate(lines) if line.lstrip().startswith("|"))
    rows = [line for line in lines[first:first + 50] if line.lstrip().startswith("|")]
    assert len(rows) == 2 + 10  # the header, its rule, a row per lie
    quoted = re.findall(r"`([^`]+)`", "\n".join(rows))
    tested = {reason for _, _, reason in REFUSED} | {r for _, _, o, r in PYTEST_PATH if o == "inconclusive"}
    for reason in tested:
        assert any(reason in q for q in quoted), f"no docs row quotes {reason!r}"


# --- a config's null or mapping is no folder name (found: "None" and "{'extra_body': None}" in the checkout) ----

@pytest.mark.parametrize("value, got", [("null", "null"), ("{extra_body: null}", "dict"), ("[a]", "list"),
                                        ("true", "bool")])
def test_a_dump_dir_that_is_no_text_is_one_line_and_no_folder(tmp_path, monkeypatch, value, got):
    from pytest_s2st.cases import load_case
    from pytest_s2st.errors import S2STError

    monkeypatch.chdir(tmp_path)
    cfg = tmp_path / "case.yaml"
    cfg.write_text(f"general:\n  model_type: callable\n  dump_dir: {value}\nstage1:\n  entry: m.py:f\n")
    with pytest.raises(S2STError) as exc:
        load_case(cfg, {}, lambda name: None)
    assert str(exc.value) == f"{cfg}:3 (general.dump_dir): must be a path (text), got {got}"
    assert [p.name for p in tmp_path.iterdir()] == ["case.yaml"]
