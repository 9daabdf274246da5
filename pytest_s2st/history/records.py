"""One saved run -> the rows the history keeps (pytest-free, standard library only).

A document is what ``--benchmark-json`` / ``--benchmark-autosave`` write: pytest-benchmark's
``machine_info``, ``commit_info``, ``datetime`` and ``benchmarks``. Rows of this plugin carry every metric
with its method and interval (``extra_info.s2st``, ``extra_info.s2st_service``); a plain
pytest-benchmark row gives its runtime alone (the mean, with a t-based 95% interval from its stddev).

A point is one value of one series: (benchmark, part, metric, statistic). ``part`` is ``total`` for a
case, a stage's name, or ``c<N>`` for a service level. A metric measured as missing (n/a with a reason)
is kept as a point without a value: the trend shows the gap, never a 0.
"""
from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import S2STError
from ..inputs import finite, parse_json, read_text, show
from ..metrics import BY_NAME, SERVICE_METRICS
from ..runtime_stats import own_times

TOTAL = "total"
MAX_TEXT = 500  # a free-text field kept from a document (a reason, a method): longer is cut, never refused


@dataclass(frozen=True)
class Run:
    key: str                 # sha256 of the document: importing the same file twice adds nothing
    run_time: str            # the document's datetime (ISO 8601)
    machine: str             # machine_info.node
    commit: str | None = None
    branch: str | None = None
    commit_time: str | None = None
    dirty: bool | None = None
    arch: str | None = None
    cpu: str | None = None
    python: str | None = None
    torch: str | None = None
    source: str | None = None  # the file it came from, or "session"
    base_commit: str | None = None  # --s2st-ab-base: the commit each paired ratio of this run is against
    subject: str | None = None      # the commit's subject line, where the session could read it


@dataclass(frozen=True)
class Point:
    benchmark: str
    part: str
    metric: str
    value: float | None
    statistic: str = ""
    low: float | None = None
    high: float | None = None
    n: int | None = None
    method: str | None = None
    reason: str | None = None


@dataclass(frozen=True)
class Verdict:
    benchmark: str
    kind: str                # "gate" (the quality gate / budgets verdict) or "ab" (the A/B change)
    verdict: str             # PASS / FAIL / INCONCLUSIVE, or the A/B's word (slower, faster, ...)
    detail: str = ""


@dataclass
class Document:
    run: Run
    points: list[Point] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)


def _text(value: Any) -> str | None:
    if value is None:
        return None
    text = value if isinstance(value, str) else show(value)
    return text[:MAX_TEXT]


def _branch(value: Any) -> str | None:
    text = _text(value)
    return None if text in (None, "", "(unknown)") else text  # pytest-benchmark's word for "not in git"


# two-sided 95 % t quantiles (scipy.stats.t.ppf(0.975, df), 6 decimals): no scipy import in a session that only
# appends (scipy.stats cost 0.9 s and 63 MiB a session, measured)
_T975 = (12.706205, 4.302653, 3.182446, 2.776445, 2.570582, 2.446912, 2.364624, 2.306004, 2.262157, 2.228139,
         2.200985, 2.178813, 2.160369, 2.144787, 2.13145, 2.119905, 2.109816, 2.100922, 2.093024, 2.085963,
         2.079614, 2.073873, 2.068658, 2.063899, 2.059539, 2.055529, 2.051831, 2.048407, 2.04523, 2.042272)


def _t95(df: int) -> float:
    """The two-sided 95 % t quantile: the table to 30 degrees of freedom, then Cornish-Fisher's expansion (within
    1e-6 of scipy's from 31 on)."""
    if df <= len(_T975):
        return _T975[max(df, 1) - 1]
    z = 1.959963984540054
    return (z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2)
            + (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / (384 * df ** 3))


def _interval(value: float | None, details: Mapping[str, Any]) -> tuple[float | None, float | None]:
    precision = finite(details.get("precision"))
    if value is None or precision is None or precision < 0:
        return None, None
    return value * (1 - precision), value * (1 + precision)


def _metric_points(benchmark: str, part: str, metrics: Any) -> list[Point]:
    points = []
    if not isinstance(metrics, Mapping):
        return points
    for name, m in metrics.items():
        if not isinstance(m, Mapping) or name not in BY_NAME:
            continue  # the metric table is the vocabulary: a name outside it has no direction, unit or title
        details = m.get("details") if isinstance(m.get("details"), Mapping) else {}
        value = finite(m.get("value"))
        low, high = _interval(value, details)
        rounds = details.get("rounds")
        points.append(Point(benchmark, part, name, value, _text(details.get("statistic")) or "",
                            low, high, rounds if isinstance(rounds, int) and not isinstance(rounds, bool) else None,
                            _text(m.get("method")), None if value is not None else _text(m.get("reason") or "n/a")))
        own = _own_mean(details) if name == "runtime_s" else None
        if own is not None:
            mean_own, n_own, half = own
            points.append(Point(benchmark, part, name, mean_own, OWN_MEAN,
                                *((mean_own - half, mean_own + half) if half is not None else (None, None)),
                                n=n_own, method=OWN_METHOD))
    return points


OWN_MEAN = "own mean"
PAIRED = "paired ratio"  # head/base runtime of a code-version A/B: its own series, chained over the commits
PAIRED_MODE = "code versions"
OWN_METHOD = "mean of the rounds less each round's run-queue wait (measure/runqueue.py)"


def _own_mean(details: Mapping[str, Any]) -> tuple[float, int, float | None] | None:
    """The runtime as the A/B judges it on a busy machine: each round's wall time less the time its thread waited
    for a CPU. A series of its own: a neighbour's load moves the wall-time mean, not this one."""
    rounds, waits = details.get("rounds_s"), details.get("waited_s")
    if not isinstance(rounds, list) or not isinstance(waits, list) or not rounds:
        return None
    values = rounds + waits
    if not all(type(v) is float and math.isfinite(v) for v in values):  # json gives floats; else check each
        values = [finite(v) for v in values]
        if None in values or any(isinstance(v, bool) for v in rounds + waits):
            return None
    own = own_times(values[:len(rounds)], values[len(rounds):])
    if not own:
        return None
    mean = math.fsum(own) / len(own)
    if len(own) < 2:
        return mean, 1, None
    sd = math.sqrt(math.fsum((x - mean) ** 2 for x in own) / (len(own) - 1))
    return mean, len(own), _t95(len(own) - 1) * sd / math.sqrt(len(own))  # as the wall-time mean's interval


def _service_points(benchmark: str, data: Mapping[str, Any]) -> list[Point]:
    level = data.get("concurrency")
    summary = data.get("summary")
    if not isinstance(level, int) or isinstance(level, bool) or not isinstance(summary, Mapping):
        return []
    part, points = f"c{level}", []
    for metric in SERVICE_METRICS:
        value = summary.get(metric.name)
        if metric.stats:
            stats = value if isinstance(value, Mapping) else {}
            points += [Point(benchmark, part, metric.name, finite(stats.get(s)), s, method=metric.measured_by)
                       for s in metric.stats if s in stats]
        elif metric.name in summary:
            points.append(Point(benchmark, part, metric.name, finite(value), method=metric.measured_by))
    return points


def _plain_points(benchmark: str, stats: Any) -> list[Point]:
    if not isinstance(stats, Mapping):
        return []
    mean, sd, rounds = finite(stats.get("mean")), finite(stats.get("stddev")), stats.get("rounds")
    if mean is None:
        return []
    low = high = None
    if sd is not None and isinstance(rounds, int) and rounds > 1:
        half = _t95(rounds - 1) * sd / math.sqrt(rounds)
        low, high = mean - half, mean + half
    return [Point(benchmark, TOTAL, "runtime_s", mean, "mean", low, high,
                  rounds if isinstance(rounds, int) else None, "pytest-benchmark stats (mean, t-based 95% interval)")]


def _paired_points(benchmark: str, ab: Any) -> list[Point]:
    """The code-version A/B's paired head/base runtime ratio with its 95 % interval: on a shared runner the precise
    reading of what this commit changed (the absolute means of separate runs move 3-8 %)."""
    if not isinstance(ab, Mapping) or ab.get("mode") != PAIRED_MODE:
        return []
    ratio, low, high = (finite(ab.get(k)) for k in ("ratio", "low", "high"))
    if ratio is None or ratio <= 0:
        return [Point(benchmark, TOTAL, "runtime_s", None, PAIRED, reason=_text(ab.get("missing") or ab.get("word")
                                                                                  or "no paired ratio"))]
    if low is None or high is None or not 0 < low <= ratio <= high:
        low = high = None
    pairs = ab.get("pairs")
    return [Point(benchmark, TOTAL, "runtime_s", ratio, PAIRED, low, high,
                  pairs if isinstance(pairs, int) and not isinstance(pairs, bool) else None, _text(ab.get("method")))]


def _base_commit(rows: list[Any]) -> str | None:
    for row in rows:
        extra = row.get("extra_info") if isinstance(row, Mapping) else None
        s2st = extra.get("s2st") if isinstance(extra, Mapping) else None
        ab = s2st.get("ab") if isinstance(s2st, Mapping) else None
        if isinstance(ab, Mapping) and ab.get("mode") == PAIRED_MODE and isinstance(ab.get("base_sha"), str):
            return _text(ab["base_sha"])
    return None


def _verdicts(benchmark: str, block: Mapping[str, Any]) -> list[Verdict]:
    out = []
    verdict = block.get("verdict")
    if isinstance(verdict, Mapping) and isinstance(verdict.get("status"), str):
        reasons = verdict.get("reasons") if isinstance(verdict.get("reasons"), list) else []
        out.append(Verdict(benchmark, "gate", verdict["status"][:20], _text("; ".join(map(str, reasons))) or ""))
    info = block.get("ab")
    if isinstance(info, Mapping) and isinstance(info.get("word"), str):
        ratio = finite(info.get("ratio"))
        out.append(Verdict(benchmark, "ab", info["word"][:40], f"x{ratio:.3f}" if ratio is not None else ""))
    return out


def _benchmark_rows(row: Any) -> tuple[list[Point], list[Verdict]]:
    if not isinstance(row, Mapping) or not isinstance(row.get("fullname") or row.get("name"), str):
        return [], []
    name = _text(row.get("fullname") or row.get("name"))
    extra = row.get("extra_info") if isinstance(row.get("extra_info"), Mapping) else {}
    points: list[Point] = []
    verdicts: list[Verdict] = []
    s2st, service = extra.get("s2st"), extra.get("s2st_service")
    if isinstance(s2st, Mapping):
        points += _metric_points(name, TOTAL, s2st.get("metrics"))
        for stage in s2st.get("stages") or []:
            if isinstance(stage, Mapping) and isinstance(stage.get("name"), str):
                points += _metric_points(name, _text(stage["name"]), stage.get("metrics"))
        verdicts += _verdicts(name, s2st)
        points += _paired_points(name, s2st.get("ab"))
    elif isinstance(service, Mapping):
        points += _service_points(name, service)
        verdicts += _verdicts(name, service)
    else:
        points += _plain_points(name, row.get("stats"))
    return points, verdicts


def _torch_version(rows: list[Any]) -> str | None:
    for row in rows:
        s2st = (row.get("extra_info") or {}).get("s2st") if isinstance(row, Mapping) else None
        runtime = s2st.get("runtime") if isinstance(s2st, Mapping) else None
        if isinstance(runtime, Mapping) and isinstance(runtime.get("torch"), str):
            return runtime["torch"]
    return None


def from_document(doc: Any, where: str, source: str | None = None, key: str | None = None) -> Document:
    """A parsed document -> its run and rows; anything that is not a pytest-benchmark document is one line.
    ``key``: the run's identity where the caller has one (a file's bytes hashed); else the document's canonical
    JSON is hashed."""
    if not isinstance(doc, Mapping) or not isinstance(doc.get("benchmarks"), list):
        raise S2STError(f"{where}: not a pytest-benchmark JSON document (no 'benchmarks' list)")
    machine = doc.get("machine_info") if isinstance(doc.get("machine_info"), Mapping) else {}
    commit = doc.get("commit_info") if isinstance(doc.get("commit_info"), Mapping) else {}
    cpu = machine.get("cpu") if isinstance(machine.get("cpu"), Mapping) else {}
    when = doc.get("datetime")
    if not isinstance(when, str) or not when:
        raise S2STError(f"{where}: no 'datetime': a run without its time cannot be placed in a history")
    dirty = commit.get("dirty")
    commit_id = commit.get("id")
    key = key or hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()
    run = Run(key=key, run_time=when[:64],
              machine=_text(machine.get("node")) or "unknown",
              commit=_text(commit_id) if commit_id not in (None, "unversioned") else None,
              branch=_branch(commit.get("branch")), commit_time=_text(commit.get("time")),
              dirty=dirty if isinstance(dirty, bool) else None, arch=_text(machine.get("machine")),
              cpu=_text(cpu.get("brand_raw")), python=_text(machine.get("python_version")),
              torch=_torch_version(doc["benchmarks"]), source=_text(source),
              base_commit=_base_commit(doc["benchmarks"]), subject=_text(commit.get("subject")))
    out = Document(run)
    for row in doc["benchmarks"]:
        points, verdicts = _benchmark_rows(row)
        out.points += points
        out.verdicts += verdicts
    return out


def load_document(path: str | Path) -> Document:
    """A saved run from its file, keyed by the hash of its bytes (re-serialising a saved run to hash it took 16 s of
    an import of 100 runs): the same file imported twice adds nothing."""
    text = read_text(path, "saved run")
    where = show(str(path))
    return from_document(parse_json(text, where, "saved run"), where, str(path),
                         key="file:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest())
