"""A response's PCM goes to its WAV as it arrives (service/evidence.py): what a stream holds in the
client does not grow with its length, and the WAV on disk is what the server sent, byte for byte."""
from __future__ import annotations

import asyncio
import hashlib
import json
import tracemalloc

import numpy as np
import pytest
import soundfile as sf
from aiohttp import web

from pytest_s2st import runs
from pytest_s2st.service import evidence
from pytest_s2st.service.client import run_load
from pytest_s2st.service.evidence import FLUSH_BYTES, AudioSink, Writer
from pytest_s2st.service.record import RequestRecord
from pytest_s2st.service.server import serve_app

RATE = 48_000
PIECE = 9_601  # odd: pieces split samples, and the sink's flushes fall mid-piece


def pcm_of(seconds: float, seed: int) -> bytes:
    return np.random.default_rng(seed).integers(-32768, 32767, int(seconds * RATE), dtype="<i2").tobytes()


async def pcm_server(pcm: bytes):
    """OpenAI's raw PCM answer: ``pcm`` in PIECE-byte chunks, each written when the last was taken."""
    async def speech(request):
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": f"audio/pcm;rate={RATE}"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        view = memoryview(pcm)
        for i in range(0, len(pcm), PIECE):
            await resp.write(view[i:i + PIECE])
        await resp.write_eof()
        return resp

    async def models(request):
        return web.json_response({"data": [{"id": "m"}]})

    app = web.Application()
    app.router.add_post("/v1/audio/speech", speech)
    app.router.add_get("/v1/models", models)
    return await serve_app(app, shutdown_timeout=0.5)


def test_stream_memory_does_not_grow_with_its_length_and_the_wav_is_what_was_sent(tmp_path, monkeypatch):
    # the writer thread may fall behind on a loaded machine: a small queue bound makes the reader wait
    # for it, so the test bounds the mechanism, not the scheduler
    monkeypatch.setattr(evidence, "MAX_QUEUED_BYTES", 4 * FLUSH_BYTES)
    short, long = pcm_of(1.0, 1), pcm_of(30.0, 2)  # 96 kB and 2.9 MB of audio

    async def one(pcm: bytes, out) -> tuple[int, dict]:
        runner, port = await pcm_server(pcm)
        try:
            tracemalloc.reset_peak()
            before = tracemalloc.get_traced_memory()[0]
            result = await run_load(f"http://127.0.0.1:{port}", [{"id": "a", "text": "x"}], 1, out_dir=out,
                                    warmups=0, protocol="openai", timeout_s=60)
            return tracemalloc.get_traced_memory()[1] - before, result.records[0]
        finally:
            await runner.cleanup()

    tracemalloc.start()
    try:
        held_short, r_short = asyncio.run(one(short, tmp_path / "short"))
        held_long, r_long = asyncio.run(one(long, tmp_path / "long"))
    finally:
        tracemalloc.stop()
    print(f"peak traced growth: 1 s stream {held_short / 1024:.0f} KiB, 30 s stream {held_long / 1024:.0f} KiB")
    # 30x the audio: the old client held all of it (twice: its buffer, then the copy it hashed); now a window
    assert held_long - held_short < 2 * 1024 * 1024, (held_short, held_long)
    for pcm, r, out in ((short, r_short, tmp_path / "short"), (long, r_long, tmp_path / "long")):
        assert r["status"] == "ok", r["error"]
        wav = runs.wav_path(out, r["id"]).read_bytes()
        assert wav == runs.wav_bytes(pcm, RATE)  # the whole file, header included, byte for byte
        assert r["pcm_sha256"] == hashlib.sha256(pcm).hexdigest()
        data, sr = sf.read(runs.wav_path(out, r["id"]), dtype="int16")  # what libsndfile reads back
        assert sr == RATE and data.astype("<i2").tobytes() == pcm
        assert sum(n for _, n in r["chunks"]) == len(pcm) and len(r["chunks"]) >= len(pcm) // (256 * 1024)
        assert r["audio_seconds"] == len(pcm) / 2 / RATE
        saved = runs.read_records(out)[0]
        assert saved == r and isinstance(saved["chunks"], list)  # the compact timeline is saved as its list
        assert not list((out / runs.WAV_DIR).glob("*.part"))


def test_sink_keeps_a_bounded_window_and_writes_the_wav(tmp_path):
    handed: list[int] = []

    def submit(fn, data):  # the writer thread, run at once
        handed.append(len(data))
        fn(data)

    pcm = pcm_of(30.0, 3)
    sink = AudioSink(tmp_path / "a.wav", submit)
    for i in range(0, len(pcm), PIECE):
        sink.add(pcm[i:i + PIECE])
        assert len(sink._pending) < FLUSH_BYTES  # what the event loop holds between flushes
    sink.flush()
    assert sink.size == len(pcm) == sum(handed) and max(handed) < FLUSH_BYTES + PIECE
    assert sink.finish(RATE) == hashlib.sha256(pcm).hexdigest()
    assert (tmp_path / "a.wav").read_bytes() == runs.wav_bytes(pcm, RATE)
    assert not (tmp_path / "a.wav.part").exists()


@pytest.mark.parametrize("outcome", ["hash_mismatch", "failed"])
def test_a_response_without_evidence_leaves_no_file(tmp_path, outcome):
    writer = Writer(tmp_path)
    (tmp_path / runs.WAV_DIR).mkdir()
    writer.open()
    record = RequestRecord("c1-r0", 1, 0, False, "a", sample_rate=RATE, server_done={"pcm_sha256": "0" * 64},
                           status="ok", audio_seconds=1.0, chunks=runs.Timeline([[0.5, 6]]))
    sink = writer.sink("c1-r0")
    sink.add(b"\x01\x00" * 3)
    writer.keep(record, sink, completed=outcome == "hash_mismatch")
    writer.close()
    assert not list((tmp_path / runs.WAV_DIR).iterdir())  # neither the WAV nor its part file
    saved = json.loads((tmp_path / runs.REQUESTS).read_text())
    assert saved["chunks"] == [[0.5, 6]] and saved.get("wav") is None
    if outcome == "hash_mismatch":
        assert saved["status"] == "error" and "pcm_sha256" in saved["error"]


def test_timeline_reads_as_its_list():
    items = [[0.25, 4800], [0.5, 0], [1.0, 9600]]
    t = runs.Timeline(items)
    assert t == items and items == t and list(t) == items and t[-1] == [1.0, 9600] and t[1:] == items[1:]
    assert len(t) == 3 and t != items[:2] and t != [[0.25, 4800], [0.5, 1], [1.0, 9600]]
    assert json.loads(runs.record_json({"id": "x", "chunks": t})) == {"id": "x", "chunks": items}
    assert runs.playback_metrics({"status": "ok", "chunks": t, "sample_rate": 24000, "audio_seconds": 0.3}) == \
        runs.playback_metrics({"status": "ok", "chunks": items, "sample_rate": 24000, "audio_seconds": 0.3})
