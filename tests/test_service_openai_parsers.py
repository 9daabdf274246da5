"""The OpenAI-shape parsers (service/openai_api.py) against known truths, and fuzzed with hypothesis:
a bad input is one ValueError line, never another exception, and nothing they hold grows unbounded."""
from __future__ import annotations

import base64
import io
import json
import re
import struct

import numpy as np
import pytest
import soundfile as sf
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_s2st import runs
from pytest_s2st.service import openai_api as oa


def _pieces(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(c, len(data)) for c in cuts})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)])]


def _read(reader: oa.WavReader, pieces: list[bytes]) -> bytes:
    out = b"".join(reader.feed(p) for p in pieces)
    reader.finish()
    return out


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=400).map(lambda b: b[: len(b) // 2 * 2]), st.lists(st.integers(0, 500), max_size=8),
       st.sampled_from([8000, 16000, 24000, 48000]))
def test_wav_reader_any_split(pcm, cuts, rate):
    """Whatever the body's split into pieces, the samples come out whole and the rate is the header's."""
    reader = oa.WavReader()
    assert _read(reader, _pieces(runs.wav_bytes(pcm, rate), cuts)) == pcm and reader.rate == rate


def test_wav_reader_reads_what_soundfile_writes_with_extra_chunks():
    pcm = (np.sin(np.arange(1000) / 7) * 2000).astype("<i2")
    buf = io.BytesIO()
    sf.write(buf, pcm, 22050, format="WAV", subtype="PCM_16")
    data = buf.getvalue()
    # a LIST chunk before data (odd size: padded) and one after it, which is not audio
    extra = b"LIST" + struct.pack("<I", 5) + b"INFOx\0"
    i = data.index(b"data")
    data = data[:i] + extra + data[i:] + b"LIST" + struct.pack("<I", 4) + b"abcd"
    data = data[:4] + struct.pack("<I", len(data) - 8) + data[8:]
    reader = oa.WavReader()
    assert _read(reader, _pieces(data, [3, 30, 51, 700])) == pcm.tobytes() and reader.rate == 22050


def test_wav_reader_streamed_unknown_length():
    pcm = b"\x01\x00" * 50
    data = runs.wav_bytes(pcm, 24000)
    data = data[:40] + b"\xff\xff\xff\xff" + data[44:]
    assert _read(oa.WavReader(), [data[:45], data[45:]]) == pcm


@pytest.mark.parametrize("data, why", [
    (b"RIFX" + b"\0" * 40, "not a RIFF/WAVE header"),
    (runs.wav_bytes(b"\0\0", 8000)[:20] + b"\x03\x00" + runs.wav_bytes(b"\0\0", 8000)[22:], "format tag 3, not PCM"),
    (runs.wav_bytes(b"\0\0", 8000)[:34] + b"\x08\x00" + runs.wav_bytes(b"\0\0", 8000)[36:], "1 channel(s) of 8-bit"),
    (runs.wav_bytes(b"\0\0", 8000)[:24] + struct.pack("<I", 10**9) + runs.wav_bytes(b"\0\0", 8000)[28:],
     "sample_rate '1000000000'"),
    (b"RIFF\0\0\0\0WAVEdata\4\0\0\0\0\0\0\0", "the data chunk comes before any fmt chunk"),
    (runs.wav_bytes(b"\0\0" * 4, 8000)[:-2], "ended 2 bytes short"),
    (runs.wav_bytes(b"\0\0", 8000)[:30], "ended inside the WAV header"),
])
def test_wav_reader_refuses_with_one_line(data, why):
    with pytest.raises(ValueError, match=re.escape(why)):
        _read(oa.WavReader(), [data])


def test_wav_header_is_bounded():
    reader = oa.WavReader(max_header=1024)
    junk = b"junk" + struct.pack("<I", 10**6)
    with pytest.raises(ValueError, match="no data chunk within the first 1024 bytes"):
        reader.feed(b"RIFF\0\0\0\0WAVE" + junk)
    reader = oa.WavReader(max_header=1024)
    with pytest.raises(ValueError, match="no data chunk"):
        for _ in range(100):  # many small chunks: the held header stays bounded
            reader.feed(b"abcd\0\0\0\0" * 20 if reader._head else b"RIFF\0\0\0\0WAVE")
    assert len(reader._head) <= 1024 + 160


@settings(max_examples=400, deadline=None)
@given(st.lists(st.binary(max_size=64), max_size=6))
def test_wav_reader_fuzzed(pieces):
    reader = oa.WavReader(max_header=256)
    out = 0
    try:
        for p in [b"RIFF\0\0\0\0WAVE", *pieces]:
            out += len(reader.feed(p))
        reader.finish()
    except ValueError as exc:
        assert "\n" not in str(exc)
    assert out <= sum(map(len, pieces)) and len(reader._head) <= 256 + 64 + 12


def test_parse_event_known():
    audio = base64.b64encode(b"\x01\x00").decode()
    assert oa.parse_event(json.dumps({"type": oa.DELTA, "audio": audio}).encode()) == ("delta", (b"\x01\x00", None))
    assert oa.parse_event(json.dumps({"type": oa.DELTA, "audio": audio, "sample_rate": 16000}).encode())[1][1] == 16000
    assert oa.parse_event(b'{"type": "speech.audio.done", "usage": {}}')[0] == "done"
    assert oa.parse_event(b"[DONE]") == ("done", {})
    assert oa.parse_event(b'{"error": {"message": "no"}}') == ("error", "no")
    assert oa.parse_event(b'{"type": "audio"}') == ("other", "audio")
    with pytest.raises(ValueError, match="'audio' is not base64"):
        oa.parse_event(b'{"type": "speech.audio.delta", "audio": "**"}')
    with pytest.raises(ValueError, match="sample_rate"):
        oa.parse_event(json.dumps({"type": oa.DELTA, "audio": audio, "sample_rate": True}).encode())


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.binary(max_size=200), st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["type", "audio", "error",
                                                                                  "sample_rate", "x"]), inner,
                                                                max_size=4),
    max_leaves=8).map(lambda v: json.dumps(v).encode())))
def test_parse_event_fuzzed(raw):
    try:
        kind, _ = oa.parse_event(raw)
    except ValueError as exc:
        assert "\n" not in str(exc)
    else:
        assert kind in ("delta", "done", "error", "other")


@pytest.mark.parametrize("text, why", [("[1]", "got a JSON list"), ("{", "not JSON"), ('"x"', "got a JSON str"),
                                       ("{" * 100000, "at most 65536 characters")])
def test_extra_body_refused_with_one_line(text, why):
    with pytest.raises(ValueError, match=why) as info:
        oa.parse_extra_body(text)
    assert "\n" not in str(info.value)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60))
def test_extra_body_fuzzed(text):
    try:
        out = oa.parse_extra_body(text)
    except ValueError as exc:
        assert "\n" not in str(exc)
    else:
        assert isinstance(out, dict) and json.dumps(out, allow_nan=False)


def test_build_request_maps_the_workload_and_the_extra_body_wins():
    item = {"id": "a", "text": "hi", "voice": "Ryan", "language": "English", "seed": 3, "instruct": "calm"}
    assert oa.build_request(item, "m", {"stream": False, "task_type": "CustomVoice"}) == {
        "model": "m", "input": "hi", "voice": "Ryan", "language": "English", "instructions": "calm",
        "response_format": "pcm", "stream": False, "task_type": "CustomVoice"}
    assert "model" not in oa.build_request({"text": "hi"}, None, None)


@pytest.mark.parametrize("ctype, rate", [("audio/pcm", None), ("audio/L16; rate=16000", 16000),
                                         ('audio/pcm;sample_rate="8000"', 8000)])
def test_content_rate(ctype, rate):
    assert oa.content_rate(ctype) == rate


@pytest.mark.parametrize("ctype", ["audio/pcm;rate=0", "audio/pcm;rate=-5", "audio/pcm;rate=1e9", "audio/pcm;rate=x"])
def test_content_rate_refused(ctype):
    with pytest.raises(ValueError, match="is not in 1-384000"):
        oa.content_rate(ctype)


# the server's request model is fuzzed in tests/test_service_request_model.py
