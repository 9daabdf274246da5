"""The service run directory: its layout, writers, readers and per-request metrics (pytest-free).

    <root>/<case_id>/c<N>/     one concurrency level of one case (``level_dir``)
    out_dir/requests.jsonl     one JSON record per request, appended as each request ends
    out_dir/wav/<id>.wav       the audio of each completed response (ids c<N>-r<i>, warm-ups c<N>-w<i>)
    out_dir/summary.json       {"endpoint", "identity", "by_concurrency": {"<N>": {concurrency, summary, ...}}}

One directory may hold several concurrency levels (ids carry the level), as the seed's collect does
for ``--concurrency 1 4 8``. Writers never leave a half-written file under a final name. Readers
take back what a killed run left: a truncated last record is dropped, anything else unreadable is
an S2STError naming file:line. ``request_metrics`` is the one definition of TTFA / latency / RTF,
shared by the load summary and the quality gate's timing judgement.

Imports only the standard library: the load generator, the gate and the CLI all read runs through it.
"""
from __future__ import annotations

import json
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import S2STError

REQUESTS = "requests.jsonl"
WAV_DIR = "wav"
SUMMARY = "summary.json"

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


# --- names -----------------------------------------------------------------------------------

def level_name(concurrency: int) -> str:
    return f"c{concurrency}"


def request_id(concurrency: int, index: int, warmup: bool) -> str:
    return f"{level_name(concurrency)}-{'w' if warmup else 'r'}{index}"


def level_dir(root: str | Path, case_id: str, concurrency: int) -> Path:
    return Path(root) / case_id / level_name(concurrency)


def wav_path(out_dir: str | Path, rid: str) -> Path:
    if not isinstance(rid, str) or not _ID.match(rid):
        raise S2STError(f"request id {rid!r}: not a safe file name")
    return Path(out_dir) / WAV_DIR / f"{rid}.wav"


# --- writers ---------------------------------------------------------------------------------

def append_record(out_dir: str | Path, record: dict) -> None:
    """Append one line and flush: a run killed later still leaves this record readable."""
    line = json.dumps(record, separators=(",", ":"), ensure_ascii=False) + "\n"
    with open(Path(out_dir) / REQUESTS, "a", encoding="utf-8") as fh:
        fh.write(line)
        fh.flush()


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


def write_summary(
    out_dir: str | Path,
    summary: dict,
    *,
    concurrency: int,
    endpoint: str,
    identity: dict | None,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Merge this concurrency level's entry into out_dir/summary.json (atomic replace)."""
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


# --- readers ---------------------------------------------------------------------------------

def read_records(out_dir: str | Path) -> list[dict]:
    """All complete records of out_dir/requests.jsonl ([] when there is none), in file order.

    A truncated LAST line (writer killed mid-write) is dropped; a bad line anywhere else (not a
    JSON object with a string "id") is corruption and raises S2STError naming file:line.
    """
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
            # every user keys records by id (WAV name, verdict pairing): one without is unusable
            if not isinstance(record, dict) or not isinstance(record.get("id"), str):
                raise ValueError("not a JSON object with a string 'id'")
        except ValueError as exc:
            if lineno == len(lines) and not text.endswith("\n"):
                break  # killed mid-write: the record was never finished
            raise S2STError(f"{path}:{lineno}: unreadable request record ({exc})") from None
        records.append(record)
    return records


def read_summary(out_dir: str | Path) -> dict:
    """out_dir/summary.json, or {} when there is none."""
    path = Path(out_dir) / SUMMARY
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise S2STError(f"{path}: unreadable summary ({exc})") from None
    if not isinstance(data, dict):
        raise S2STError(f"{path}: unreadable summary (not a JSON object)")
    return data


@dataclass
class Run:
    """One run dir: request records by id, the summary, and where each WAV is."""

    path: Path
    records: dict[str, dict]
    summary: dict[str, Any]
    problem: str | None = None  # why this run cannot be used at all

    def wav(self, rid: str) -> Path:
        rel = self.records.get(rid, {}).get("wav")
        return self.path / rel if isinstance(rel, str) and rel else self.path / WAV_DIR / f"{rid}.wav"

    def saved_policy(self) -> dict | None:
        """The policy saved with the run: summary["policy"], or the same one on every concurrency level."""
        if isinstance(self.summary.get("policy"), dict):
            return self.summary["policy"]
        levels = self.summary.get("by_concurrency")
        found = [lv.get("policy") for lv in levels.values() if isinstance(lv, dict)] if isinstance(levels, dict) else []
        found = [p for p in found if isinstance(p, dict)]
        return found[0] if found else None


def load_run(path: str | Path) -> Run:
    """The run at ``path``; a missing dir or empty run is a Run with ``problem`` set, corruption raises."""
    path = Path(path)
    req = path / REQUESTS
    if not path.is_dir():
        return Run(path, {}, {}, f"{path} is not a directory")
    if not req.exists():
        return Run(path, {}, {}, f"{req} is missing")
    records = {r["id"]: r for r in read_records(path)}  # a retried id: the last record is the one kept
    summary = read_summary(path)
    if not records:
        return Run(path, {}, summary, f"{req} holds no request records")
    return Run(path, records, summary)


# --- per-request metrics ---------------------------------------------------------------------

def _num(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)  # JSON true is no time


def request_metrics(record: dict) -> dict[str, float | None]:
    """ttfa_s / latency_s / rtf of one record; None where it failed or lacks the timestamps.

    ttfa_s    = the record's own numeric ttfa_s, else first_audio_t - send_t
    latency_s = done_t - send_t
    rtf       = latency_s / audio_seconds   (audio_seconds > 0)
    """
    if record.get("status") != "ok":
        return {"ttfa_s": None, "latency_s": None, "rtf": None}
    send, first, done, audio = (record.get(k) for k in ("send_t", "first_audio_t", "done_t", "audio_seconds"))
    own = record.get("ttfa_s")
    ttfa = own if _num(own) else (first - send if _num(first) and _num(send) else None)
    latency = done - send if _num(done) and _num(send) else None
    rtf = latency / audio if latency is not None and _num(audio) and audio > 0 else None
    return {"ttfa_s": ttfa, "latency_s": latency, "rtf": rtf}


__all__ = ["REQUESTS", "WAV_DIR", "SUMMARY", "level_name", "request_id", "level_dir", "wav_path",
           "append_record", "wav_bytes", "write_bytes_atomic", "write_wav_atomic", "write_summary",
           "read_records", "read_summary", "Run", "load_run", "request_metrics"]
