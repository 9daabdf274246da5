"""One service level driven as N parts (pytest-free): the parts' rendezvous, and one level from their records.

A level of concurrency c split into N parts is N load generators of c/N each (one per xdist worker, so
one client process is no bottleneck), started together:

* rendezvous: every part writes ``<level dir>/parts/<part>.ready`` (its worker, its endpoint) and waits,
  bounded, until all N are there; after its load it writes ``<part>.done`` (its level data);
* each part keeps its own run directory ``<level dir>/<part>/`` (requests.jsonl, wav/, summary.json);
* the merge reads every part's requests.jsonl and summary.json and computes ONE level with
  ``stats.summarize`` over the union of the records: percentiles are exact, not averages of the parts'.

Clocks: a part's record times are perf_counter seconds since its own run start; its summary.json saves
that start as ``started_wall`` (time.time()) and ``t0_perf``. A time t of part k is the wall instant
started_wall_k + t; merged records are shifted onto the merged level's clock, whose 0 is the earliest
part's measured-phase start. The merged wall is earliest measured-phase start -> latest measured-phase end
(each part's warmup_wall_s .. warmup_wall_s + wall_s), the same span one client's wall_s covers.
"""
from __future__ import annotations

import json
import math
import os
import re
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from .. import runs
from ..errors import S2STError
from ..inputs import load_json

BARRIER_DIR = "parts"
POLL_S = 0.01
# Every part starts its load at the same wall-clock instant: the last "ready" mark + this margin. Leaving the
# barrier on each part's own next poll instead scattered the starts by the scheduler's delay on a loaded
# machine (28 ms seen in CI: longer than a whole part of 24 tiny requests).
RELEASE_MARGIN_S = 0.25
MAX_PART_FILE = 4 * 1024 * 1024  # a .ready/.done file is ours, but still read bounded
_PART = re.compile(r"^p([1-9][0-9]*)of([1-9][0-9]*)$")
_TIME_KEYS = ("due_t", "start_t", "send_t", "first_audio_t", "done_t")
METHOD = ("N parts of concurrency c/N on N client processes (xdist workers), released together by a file "
          f"rendezvous at one wall-clock instant (last part ready + {RELEASE_MARGIN_S:g} s); percentiles over the "
          "union of the parts' measured records (not averaged); wall = earliest measured-phase start -> latest "
          "measured-phase end across parts, on the wall clock (time.time) each part saved beside its perf_counter "
          "origin")


def part_id(index: int, count: int) -> str:
    return f"p{index}of{count}"


def parse_part_id(text: str) -> tuple[int, int] | None:
    match = _PART.match(text)
    if not match:
        return None
    index, count = int(match.group(1)), int(match.group(2))
    return (index, count) if index <= count else None


def part_concurrency(concurrency: int, count: int, where: str) -> int:
    """c/N, or an S2STError naming where N came from when N does not divide c."""
    if count < 1 or concurrency % count:
        raise S2STError(f"{where}: concurrency {concurrency} cannot be split into {count} equal parts "
                        f"(use levels that are multiples of {count})")
    return concurrency // count


def rotate(workload: Sequence[dict], index: int, count: int) -> list[dict]:
    """Part k starts (k-1)/N of the way into the workload: the parts do not send the same item at once."""
    items = list(workload)
    if not items:
        return items
    shift = (index - 1) * len(items) // count
    return items[shift:] + items[:shift]


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, default=str), encoding="utf-8")
    os.replace(tmp, path)  # a reader sees the whole file or none


def _read_json(path: Path) -> dict:
    data = load_json(path, "level part mark", MAX_PART_FILE)
    if not isinstance(data, dict):
        raise S2STError(f"{path}: not a JSON object")
    return data


def mark(level_dir: Path, index: int, count: int, stage: str, data: Mapping[str, Any]) -> Path:
    """``<level dir>/parts/p<k>of<N>.<stage>`` (stage: ready or done), written atomically."""
    path = Path(level_dir) / BARRIER_DIR / f"{part_id(index, count)}.{stage}"
    _write_json(path, dict(data))
    return path


def wait_for(level_dir: Path, count: int, stage: str, timeout_s: float,
             clock=time.monotonic, sleep=time.sleep) -> tuple[dict[int, dict], list[str]]:
    """Wait (bounded by timeout_s) until every part's ``.<stage>`` file exists -> ({k: its data}, missing ids).
    Returns as soon as all are there; on the bound, with the ids that never came."""
    folder = Path(level_dir) / BARRIER_DIR
    deadline = clock() + timeout_s
    while True:
        present = {k: folder / f"{part_id(k, count)}.{stage}" for k in range(1, count + 1)}
        missing = [part_id(k, count) for k, p in present.items() if not p.exists()]
        if not missing or clock() >= deadline:
            break
        sleep(POLL_S)
    found = {k: _read_json(p) for k, p in present.items() if p.exists()}
    return found, missing


def release_at(ready: Mapping[int, Mapping[str, Any]]) -> float:
    """The wall-clock instant (time.time) every part starts at: all parts read the same marks, so all agree."""
    walls = [data.get("wall") for data in ready.values()]
    if not walls or not all(type(w) in (int, float) and math.isfinite(w) for w in walls):  # a bool is no time
        raise S2STError(f"a part's ready mark has no finite 'wall' time: {walls!r}")
    return max(walls) + RELEASE_MARGIN_S


def sleep_until(wall: float, clock=time.time, sleep=time.sleep) -> float:
    """Sleep until ``clock() >= wall`` -> how late it woke (s, >= 0); a part that arrives after it goes at once."""
    while (left := wall - clock()) > 0:
        sleep(min(left, 0.05))
    return clock() - wall


def _shift(record: dict, prefix: str, offset: float) -> dict:
    out = dict(record)
    out["id"] = f"{prefix}-{record['id']}"
    out["part"] = prefix
    for key in _TIME_KEYS:
        if isinstance(out.get(key), (int, float)):
            out[key] = out[key] + offset
    if isinstance(out.get("chunks"), list):
        out["chunks"] = [[c[0] + offset, c[1]] if isinstance(c, list) and len(c) == 2
                         and isinstance(c[0], (int, float)) else c for c in out["chunks"]]
    if isinstance(out.get("wav"), str):
        out["wav"] = f"{prefix}/{out['wav']}"
    return out


def _part_level(run_dir: Path, concurrency: int) -> dict:
    summary = runs.read_summary(run_dir)
    level = (summary.get("by_concurrency") or {}).get(str(concurrency))
    if not isinstance(level, dict):
        raise S2STError(f"{run_dir / runs.SUMMARY}: no level c{concurrency} saved")
    for key in ("started_wall", "warmup_wall_s", "wall_s"):
        if not isinstance(level.get(key), (int, float)) or not math.isfinite(level[key]):
            raise S2STError(f"{run_dir / runs.SUMMARY}: level c{concurrency} has no {key}")
    return level


def merge_parts(parts: Sequence[tuple[str, Path, int]], targets: Mapping[str, Any] | None = None
                ) -> tuple[list[dict], dict, list[dict]]:
    """[(part id, its run dir, its concurrency)] -> (merged records, merged summary, per-part facts).

    Record ids become ``<part>-<id>`` (unique across parts; ``wav`` relative to the level dir)."""
    from .stats import summarize  # lazy: heavy

    if not parts:
        raise S2STError("merge_parts: no parts")
    levels = [(pid, Path(d), c, _part_level(Path(d), c)) for pid, d, c in parts]
    starts = {pid: lv["started_wall"] + lv["warmup_wall_s"] for pid, _, _, lv in levels}
    ends = {pid: starts[pid] + lv["wall_s"] for pid, _, _, lv in levels}
    origin = min(starts.values())
    merged: list[dict] = []
    facts: list[dict] = []
    for pid, run_dir, c, level in levels:
        offset = level["started_wall"] - origin
        records = runs.read_records(run_dir)
        merged += [_shift(r, pid, offset) for r in records]
        measured = [r for r in records if not r.get("warmup")]
        facts.append({"part": pid, "concurrency": c, "evidence_dir": str(run_dir), "n": len(measured),
                      "measured_start_s": starts[pid] - origin, "measured_end_s": ends[pid] - origin,
                      "wall_s": level["wall_s"], "timed_out": bool(level.get("timed_out"))})
    wall = max(ends.values()) - origin
    summary = summarize(merged, wall, dict(targets) if targets else None)
    return merged, summary, facts


def write_merged(level_dir: Path, records: list[dict], summary: dict, *, concurrency: int, endpoint: str,
                 identity: dict | None, extra: Mapping[str, Any]) -> None:
    """The level dir becomes a run dir of its own: the merged requests.jsonl and summary.json."""
    level_dir = Path(level_dir)
    path = level_dir / runs.REQUESTS
    if path.exists():
        raise S2STError(f"{path}: already holds a merged level; use a new evidence root")
    tmp = path.with_name(runs.REQUESTS + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        for record in records:
            fh.write(json.dumps(record, separators=(",", ":"), ensure_ascii=False) + "\n")
    os.replace(tmp, path)
    runs.write_summary(level_dir, summary, concurrency=concurrency, endpoint=endpoint, identity=identity,
                       extra=dict(extra))
