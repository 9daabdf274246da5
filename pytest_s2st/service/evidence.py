"""Run-directory layout of a load run, and the readers that take it back.

    out_dir/requests.jsonl   one JSON record per request, appended as each request ends
    out_dir/wav/<id>.wav     the audio of each completed response (ids c<conc>-r<i>, warm-ups c<conc>-w<i>)
    out_dir/summary.json     {"endpoint", "identity", "by_concurrency": {"<conc>": {concurrency, summary, ...}}}

One directory may hold several concurrency levels (ids carry the level), as the seed's collect does
for ``--concurrency 1 4 8``. Writers never leave a half-written file under a final name.
"""
from __future__ import annotations

import json
import os
import re
import struct
from pathlib import Path
from typing import Any

from ..errors import S2STError

REQUESTS = "requests.jsonl"
WAV_DIR = "wav"
SUMMARY = "summary.json"

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def request_id(concurrency: int, index: int, warmup: bool) -> str:
    return f"c{concurrency}-{'w' if warmup else 'r'}{index}"


def wav_path(out_dir: str | Path, rid: str) -> Path:
    if not _ID.match(rid):
        raise S2STError(f"request id {rid!r}: not a safe file name")
    return Path(out_dir) / WAV_DIR / f"{rid}.wav"


def append_record(out_dir: str | Path, record: dict) -> None:
    """Append one line and flush: a run killed later still leaves this record readable."""
    line = json.dumps(record, separators=(",", ":"), ensure_ascii=False) + "\n"
    with open(Path(out_dir) / REQUESTS, "a", encoding="utf-8") as fh:
        fh.write(line)
        fh.flush()


def read_records(out_dir: str | Path) -> list[dict]:
    """All complete records. A truncated LAST line (writer killed mid-write) is dropped;
    a bad line anywhere else is corruption and raises S2STError naming file:line."""
    path = Path(out_dir) / REQUESTS
    if not path.exists():
        return []
    text = path.read_text(encoding="utf-8", errors="replace")
    lines = text.split("\n")
    records: list[dict] = []
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            if not isinstance(record, dict):
                raise ValueError("not a JSON object")
        except ValueError as exc:
            is_last = lineno == len(lines) and not text.endswith("\n")
            if is_last:
                break  # killed mid-write: the record was never finished
            raise S2STError(f"{path}:{lineno}: unreadable request record ({exc})") from None
        records.append(record)
    return records


def wav_bytes(pcm: bytes, sample_rate: int) -> bytes:
    """A mono 16-bit PCM WAV file: the 44-byte RIFF header soundfile/libsndfile writes, then the samples.

    Built by hand because the load generator makes one per response on its event loop's clock:
    soundfile produces the same bytes (a test checks) but holds the GIL ~0.1 ms per file, which
    delays the TTFA stamps of the other streams.
    """
    if len(pcm) % 2:
        raise ValueError(f"{len(pcm)} bytes is not whole int16 samples")
    header = struct.pack("<4sI4s4sIHHIIHH4sI", b"RIFF", 36 + len(pcm), b"WAVE", b"fmt ", 16, 1, 1,
                         sample_rate, 2 * sample_rate, 2, 16, b"data", len(pcm))
    return header + pcm


def write_bytes_atomic(path: str | Path, data: bytes) -> None:
    """Write under a temp name then rename: a half-written file never has the final name."""
    path = Path(path)
    tmp = path.with_name(path.name + ".part")
    with open(tmp, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


def write_wav_atomic(path: str | Path, pcm: bytes, sample_rate: int) -> None:
    """int16 little-endian PCM -> 16-bit WAV at ``path`` (atomic)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(path, wav_bytes(pcm, sample_rate))


def read_summary(out_dir: str | Path) -> dict:
    path = Path(out_dir) / SUMMARY
    if not path.exists():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise S2STError(f"{path}: unreadable summary ({exc})") from None


def write_summary(
    out_dir: str | Path,
    summary: dict,
    *,
    concurrency: int,
    endpoint: str,
    identity: dict | None,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Merge this concurrency level's summary into out_dir/summary.json (atomic replace)."""
    out_dir = Path(out_dir)
    data = read_summary(out_dir)
    if data.get("endpoint") not in (None, endpoint):
        raise S2STError(f"{out_dir / SUMMARY}: holds runs against {data['endpoint']}, not {endpoint}")
    data["endpoint"] = endpoint
    data["identity"] = identity
    level = {"concurrency": concurrency, "summary": summary, **(extra or {})}
    data.setdefault("by_concurrency", {})[str(concurrency)] = level
    path = out_dir / SUMMARY
    tmp = path.with_name(SUMMARY + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path
