"""The load generator's memory at concurrency: O(1) per stream (issue 17 item 6).

Each response's PCM goes to its evidence WAV, and into its SHA-256, as it arrives (service/evidence.py);
the client keeps the chunk timeline (16 bytes a chunk) and a bounded window of audio, not the audio.
Before, it held every stream's audio up to the max_audio_s cap: ~38 MiB per endless stream (c8: +307 MiB).

A fast server (its own process: raw asyncio, OpenAI raw PCM answers, 0.1 s chunks written as fast as the
client reads them) and ``run_load`` in a subprocess that resets its peak RSS (VmHWM) just before the run,
so neither the server's buffers nor the imports count:

- c64 endless streams: every response goes on until the request timeout; RSS growth <= 64 MiB in total.
- c256 x 60 s streams: every record ok, every WAV complete (its PCM byte for byte what was sent, its hash
  the record's), RSS growth <= 64 MiB (the audio of the level is ~490 MB).

    pytest benchmarks/test_client_memory.py -s

Also ``python benchmarks/test_client_memory.py serve PORT_FILE SECONDS`` (SECONDS 0: endless).
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

RATE = 16_000
CHUNK = RATE // 10 * 2  # 0.1 s of int16 mono
MAX_GROWTH_MIB = 64


def pcm_block() -> bytes:
    """1 s of a deterministic tone; a response is this block repeated."""
    return (np.sin(np.arange(RATE) * 2 * np.pi * 440 / RATE) * 8000).astype("<i2").tobytes()


def serve(port_file: str, seconds: float) -> None:
    """Keep-alive HTTP/1.1: GET -> 404; POST -> chunked audio/pcm, ``seconds`` of it (0: forever)."""
    block = pcm_block()
    chunks = [b"%x\r\n%s\r\n" % (CHUNK, block[i:i + CHUNK]) for i in range(0, len(block), CHUNK)]
    head = f"HTTP/1.1 200 OK\r\nContent-Type: audio/pcm;rate={RATE}\r\nTransfer-Encoding: chunked\r\n\r\n".encode()

    async def handle(reader, writer):
        try:
            while True:
                request = await reader.readuntil(b"\r\n\r\n")
                if request.startswith(b"GET"):
                    writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                    continue
                length = int(request.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                writer.write(head)
                sent = 0
                while not seconds or sent < seconds * 10:
                    writer.write(chunks[sent % len(chunks)])
                    sent += 1
                    if sent % 8 == 0:
                        await writer.drain()
                writer.write(b"0\r\n\r\n")
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client gave up on an endless response
        finally:
            writer.close()

    async def main():
        server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=1024)
        tmp = Path(port_file + ".tmp")
        tmp.write_text(str(server.sockets[0].getsockname()[1]))
        os.replace(tmp, port_file)
        await server.serve_forever()

    asyncio.run(main())


CLIENT = """
import asyncio, json, re, sys, time
from pathlib import Path
from pytest_s2st.service.client import run_load

def status(key):
    return int(re.search(key + r":\\s+(\\d+)", open("/proc/self/status").read()).group(1))

endpoint, out, concurrency, timeout_s = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
workload = [{"id": "a", "text": "hi"}]
with open("/proc/self/clear_refs", "w") as fh:
    fh.write("5")  # the peak (VmHWM) starts over at the current RSS
before, t = status("VmRSS"), time.perf_counter()
result = asyncio.run(run_load(endpoint, workload, concurrency, out_dir=out, warmups=0, requests=concurrency,
                              timeout_s=timeout_s, protocol="openai", sample_rate=%d))
print(json.dumps({"before_kib": before, "peak_kib": status("VmHWM"), "after_kib": status("VmRSS"),
                  "took_s": time.perf_counter() - t}))
""" % RATE


def run_client(tmp_path: Path, seconds: float, concurrency: int, timeout_s: float) -> tuple[dict, Path]:
    port_file = tmp_path / "port"
    server = subprocess.Popen([sys.executable, __file__, "serve", str(port_file), str(seconds)])
    try:
        deadline = time.monotonic() + 30
        while not port_file.exists():
            assert server.poll() is None and time.monotonic() < deadline, "server did not start"
            time.sleep(0.02)
        out = tmp_path / "run"
        proc = subprocess.run([sys.executable, "-c", CLIENT, f"http://127.0.0.1:{port_file.read_text()}", str(out),
                               str(concurrency), str(timeout_s)], capture_output=True, text=True,
                              timeout=timeout_s * 3 + 120)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout.strip().splitlines()[-1]), out
    finally:
        server.kill()
        server.wait()


def _records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_c64_endless_streams_grow_the_client_by_at_most_64_mib(tmp_path):
    mem, out = run_client(tmp_path, 0, 64, timeout_s=30.0)
    growth = (mem["peak_kib"] - mem["before_kib"]) / 1024
    records = _records(out)
    audio_mb = sum(n for r in records for _, n in r["chunks"]) / 1e6
    print(f"\nc64 endless streams, 30 s each: {audio_mb:.0f} MB of audio received and written, peak RSS growth "
          f"{growth:.1f} MiB ({growth / 64 * 1024:.0f} KiB per stream), run {mem['took_s']:.1f} s")
    assert len(records) == 64
    assert all(r["status"] == "error" and r["error"].startswith("timeout") for r in records), records[0]["error"]
    assert not list((out / "wav").iterdir())  # an unfinished response leaves no WAV (nor its part file)
    assert audio_mb > 2 * MAX_GROWTH_MIB * 1.048576  # more audio than the bound: the old client held all of it
    assert growth <= MAX_GROWTH_MIB, f"RSS grew {growth:.0f} MiB"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_c256_streams_of_60_s_complete_with_bounded_memory(tmp_path):
    mem, out = run_client(tmp_path, 60, 256, timeout_s=300.0)
    growth = (mem["peak_kib"] - mem["before_kib"]) / 1024
    records = _records(out)
    expected = pcm_block() * 60
    digest = hashlib.sha256(expected).hexdigest()
    try:
        assert len(records) == 256
        for r in records:
            assert r["status"] == "ok", r["error"]
            assert r["pcm_sha256"] == digest and r["audio_seconds"] == 60.0 and len(r["chunks"]) >= 1
            wav = (out / r["wav"]).read_bytes()
            assert wav[44:] == expected and len(wav) == 44 + len(expected)
        assert not list((out / "wav").glob("*.part"))
    finally:
        for wav in (out / "wav").iterdir():  # ~490 MB: not kept by pytest's tmp_path retention
            wav.unlink()
    print(f"\nc256 x 60 s streams: {len(expected) * 256 / 1e6:.0f} MB of audio, every WAV complete and hashed; "
          f"peak RSS growth {growth:.1f} MiB, run {mem['took_s']:.1f} s")
    assert growth <= MAX_GROWTH_MIB, f"RSS grew {growth:.0f} MiB"


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        serve(sys.argv[2], float(sys.argv[3]))


# --- issue 29: through the pytest path users run (s2st_load, --s2st-endpoint), against tests/hostile.py ---------

HOSTILE = Path(__file__).resolve().parents[1] / "tests" / "hostile.py"
INNER = '''
import json, os, re
def _status(key):
    return int(re.search(key + r":\\s+(\\d+)", open("/proc/self/status").read()).group(1))
def test_load(s2st_service, s2st_workload, s2st_concurrency, s2st_load):
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
    before = _status("VmRSS")
    result = s2st_load(s2st_service, s2st_workload, concurrency=s2st_concurrency)
    with open(os.environ["MEM_OUT"], "w") as fh:
        json.dump({"before_kib": before, "peak_kib": _status("VmHWM"), "identity_error": result.identity_error,
                   "errors": sorted({str(r["error"])[:120] for r in result.records})}, fh)
'''


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
@pytest.mark.parametrize("mode, protocol", [
    ("endless_pcm", "openai"), ("endless_line", "openai"), ("endless_line", "s2st"), ("max_events", "openai"),
    ("max_events", "s2st"), ("endless_events", "s2st"), ("get_endless", "openai"), ("get_gzip_bomb", "openai"),
])
def test_c64_through_pytest_grows_by_at_most_64_mib(tmp_path, mode, protocol):
    port_file = tmp_path / "port"
    server = subprocess.Popen([sys.executable, str(HOSTILE), mode, str(port_file)])
    try:
        deadline = time.monotonic() + 60
        while not port_file.exists():
            assert server.poll() is None and time.monotonic() < deadline, "server did not start"
            time.sleep(0.05)
        (tmp_path / "test_mem.py").write_text(INNER)
        env = {**os.environ, "MEM_OUT": str(tmp_path / "mem.json"),
               "PYTHONPATH": os.pathsep.join([str(HOSTILE.parents[1]), os.environ.get("PYTHONPATH", "")])}
        proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "test_mem.py",
                               f"--s2st-endpoint=http://127.0.0.1:{port_file.read_text()}", "--s2st-concurrency=64",
                               f"--s2st-protocol={protocol}", "--s2st-requests=64", "--s2st-warmup=0",
                               "--s2st-request-timeout=8", f"--s2st-evidence-dir={tmp_path / 'ev'}"],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert (tmp_path / "mem.json").exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
        mem = json.loads((tmp_path / "mem.json").read_text())
    finally:
        server.kill()
        server.wait()
        for wav in (tmp_path / "ev").rglob("*.wav"):
            wav.unlink()
    growth = (mem["peak_kib"] - mem["before_kib"]) / 1024
    print(f"\n{mode} ({protocol}), c64 through pytest: peak RSS growth {growth:.1f} MiB; {mem['errors']}; "
          f"identity: {mem['identity_error']}")
    assert growth <= MAX_GROWTH_MIB, f"RSS grew {growth:.0f} MiB"
