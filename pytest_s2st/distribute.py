"""Spreading a benchmark session over xdist workers and CI shards (pytest-free).

- ``parse_shard`` / ``shard_partition``: ``--s2st-shard i/n`` keeps a deterministic slice of the cases.
- ``worker_index`` / ``worker_device``: xdist worker ``gwK`` pins accelerator ``K mod count``.
- ``merge_saved_runs``: joins the pytest-benchmark JSONs that shards saved into one file.
"""
from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence, TypeVar

from .errors import S2STError
from .inputs import finite, load_json, show
from .measure.device import BACKENDS
from .runtime_stats import saved_statistic, statistic
from .work import differences, work_of

T = TypeVar("T")

_SHARD_RE = re.compile(r"^\s*(\d{1,6})\s*/\s*(\d{1,6})\s*$")


def parse_shard(value: Any) -> tuple[int, int]:
    """'2/3' -> (2, 3): shard 2 of 3, 1-based (ValueError names the expected form). A parsed
    [2, 3] (the case JSON's spelling) parses to itself."""
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(type(v) is int for v in value):
        value = f"{value[0]}/{value[1]}"
    match = _SHARD_RE.match(str(value))
    if not match:
        raise ValueError(f"must be I/N with 1 <= I <= N (e.g. 1/2), got {value!r}")
    index, count = int(match[1]), int(match[2])
    if not 1 <= index <= count:
        raise ValueError(f"must be I/N with 1 <= I <= N (e.g. 1/2), got {value!r}")
    return index, count


def shard_partition(items: Sequence[T], key: Callable[[T], str], index: int, count: int) -> tuple[list[T], list[T]]:
    """(kept, dropped): the distinct keys in sorted order go round-robin to shards 1..count.

    Every shard computes the same sorted key list from the same collection, so the shards are
    disjoint and together hold every item; tests of one key (one case) always stay together, and
    the cases are spread evenly (shard sizes differ by at most one key).
    """
    keys = sorted({key(item) for item in items})
    owner = {k: i % count + 1 for i, k in enumerate(keys)}
    kept = [item for item in items if owner[key(item)] == index]
    dropped = [item for item in items if owner[key(item)] != index]
    return kept, dropped


def worker_index(worker_id: str | None) -> int | None:
    """'gw3' -> 3; None (not an xdist worker) or another spelling -> None."""
    match = re.fullmatch(r"gw(\d+)", worker_id or "")
    return int(match[1]) if match else None


def worker_device(asked: str, index: int | None, count: Callable[[str], int]) -> str:
    """The device one worker uses: a backend that takes an index (measure.device.BACKENDS), asked without
    one -> '<kind>:<index mod count>'.

    Anything else (cpu, auto, an explicit 'cuda:1', not a worker, no device visible) is kept as
    asked: resolving it later reports a missing device with its usual one line.
    """
    backend = BACKENDS.get(asked)
    if index is None or backend is None or not backend.indexed:
        return asked
    visible = count(asked)
    return f"{asked}:{index % visible}" if visible > 0 else asked


def accelerator_count(kind: str) -> int:
    """How many devices of an indexed backend torch sees (0 when it cannot tell); imports torch (and the
    backend's own module, torch_npu)."""
    try:
        torch = BACKENDS[kind].device.load_torch()
        return int(getattr(torch, kind).device_count())
    except BaseException as exc:  # noqa: BLE001 -- a broken backend is reported when the device is resolved
        if isinstance(exc, KeyboardInterrupt):
            raise
        return 0


# ---------------------------------------------------------------------------------------------- merge

MAX_RUN_BYTES = 256 * 2**20  # one saved run; pytest-benchmark's JSON with raw data stays far below
# what must agree for rows from different shards to form one comparable run
MACHINE_KEYS = ("machine", "system", "python_implementation", "python_version")
COMMIT_KEYS = ("id", "dirty", "project")


def load_saved_run(path: str | Path) -> dict[str, Any]:
    """One pytest-benchmark JSON (--benchmark-json / --benchmark-save): checked, one line on any fault."""
    path = Path(path)
    data = load_json(path, "saved run", MAX_RUN_BYTES)
    if not isinstance(data, dict):
        raise S2STError(f"{path}: not a pytest-benchmark run (top level is {type(data).__name__}, not an object)")
    for key, kind in (("machine_info", dict), ("commit_info", dict), ("benchmarks", list)):
        if not isinstance(data.get(key), kind):
            raise S2STError(f"{path}: not a pytest-benchmark run ({key!r} missing or not a {kind.__name__})")
    for i, bench in enumerate(data["benchmarks"]):
        if not isinstance(bench, dict) or not isinstance(bench.get("fullname"), str) \
                or not isinstance(bench.get("stats"), dict):
            raise S2STError(f"{path}: benchmarks[{i}] has no fullname/stats (not a pytest-benchmark row)")
        why = _malformed_row(bench)
        if why:
            raise S2STError(f"{path}: benchmarks[{i}] ({bench['fullname'][:120]}): {why}")
    return data


def _malformed_row(bench: Mapping[str, Any]) -> str | None:
    """Why a row's extra_info.s2st cannot be merged (a part that is not of its JSON type), or None."""
    why = malformed_s2st(bench)
    s2st = (bench.get("extra_info") or {}).get("s2st") if not why else None
    if why or not s2st:
        return why
    if "metrics" in s2st and not isinstance(s2st["metrics"], Mapping):
        return "extra_info.s2st.metrics is not an object"
    stages = s2st.get("stages", [])
    if not isinstance(stages, list) or not all(isinstance(st, Mapping) and isinstance(st.get("metrics", {}), Mapping)
                                               for st in stages):
        return "extra_info.s2st.stages is not a list of objects with metrics objects"
    return _unknown_statistic(s2st)


def _unknown_statistic(s2st: Mapping[str, Any]) -> str | None:
    """Why a runtime of the row names no known statistic (runtime_stats.saved_statistic), or None."""
    parts = [("", s2st.get("metrics"))] + [(f"stages[{i}] ", st.get("metrics"))
                                           for i, st in enumerate(s2st.get("stages", []))]
    for where, metrics in parts:
        try:
            saved_statistic((metrics or {}).get("runtime_s"))
        except ValueError as exc:
            return f"extra_info.s2st {where}{exc}"
    return None


def malformed_s2st(saved: Any) -> str | None:
    """Why a saved benchmark entry's ``extra_info.s2st`` cannot be read (it is there but not an object), or
    None. Such an entry would otherwise read as a benchmark with no counterpart."""
    if not isinstance(saved, Mapping) or "extra_info" not in saved:
        return None
    extra = saved["extra_info"]
    if not isinstance(extra, Mapping):
        return f"extra_info is a JSON {_json_type(extra)}, not an object"
    if "s2st" in extra and not isinstance(extra["s2st"], Mapping):
        return f"extra_info.s2st is a JSON {_json_type(extra['s2st'])}, not an object"
    return None


def _json_type(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number")


def _cpu_name(cpu: Any) -> str | None:
    """machine_info["cpu"]: pytest-benchmark's py-cpuinfo object, or (hand-written, another tool) a plain name."""
    if isinstance(cpu, Mapping):
        name = cpu.get("brand_raw")
        return name if isinstance(name, str) else None
    return cpu if isinstance(cpu, str) else None


def _differing(a: Mapping[str, Any], b: Mapping[str, Any], keys: Iterable[str]) -> list[str]:
    return [f"{k} {a.get(k)!r} != {b.get(k)!r}" for k in keys if a.get(k) != b.get(k)]


def _rounds(entry: Mapping[str, Any]) -> list:
    details = entry.get("details")
    rounds = details.get("rounds_s") if isinstance(details, Mapping) else None
    return list(rounds) if isinstance(rounds, list) else []


def fold_repeats(benches: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One benchmark from its repeat runs (separate processes, one commit): the first run's row, whose runtime
    (the benchmark's and each stage's) becomes the runs' statistic of the runs' runtimes (the statistic each
    saved, by name: the mean of the runs' means), each run's value kept in ``runs_s`` and every round in
    ``rounds_s``: compare judges a change between runs against them (significance.compare_runs). Runs whose
    runtimes hold different statistics are refused (S2STError, one line)."""
    folded = copy.deepcopy(benches[0])
    s2st = (folded.get("extra_info") or {}).get("s2st")
    if not s2st:
        return folded
    sides = [(b.get("extra_info") or {}).get("s2st") or {} for b in benches]

    def fold(metrics: dict[str, Any], parts: list[dict[str, Any]]) -> None:
        entries = [p.get("runtime_s") if isinstance(p.get("runtime_s"), Mapping) else {} for p in parts]
        means = [e.get("value") for e in entries]
        if not isinstance(metrics.get("runtime_s"), dict) or any(
                isinstance(m, bool) or not isinstance(m, (int, float)) for m in means):
            return  # a run without a runtime: nothing to fold, the first run's row stands
        try:
            names = {saved_statistic(e) for e in entries}
        except ValueError as exc:
            raise S2STError(f"{folded.get('fullname', 'a benchmark')}: {exc}") from None
        if len(names) > 1:
            raise S2STError(f"{folded.get('fullname', 'a benchmark')}: its runs' runtimes hold different statistics "
                            f"({', '.join(sorted(names))}): they cannot fold into one")
        name = names.pop()
        entry = metrics["runtime_s"]
        entry["value"] = statistic(name).of(means)  # the mean never overflows where the means do not
        if not isinstance(entry.get("details"), dict):
            entry["details"] = {}
        details = entry["details"]
        details["statistic"] = name
        details["runs_s"] = [float(m) for m in means]
        details["rounds_s"] = [r for e in entries for r in _rounds(e)]
        details["rounds"] = len(details["rounds_s"])

    def fold_waits(metrics: dict[str, Any], parts: list[dict[str, Any]]) -> None:
        """Every round's run-queue wait beside its round, or none at all (measure/runqueue.py)."""
        details = (metrics.get("runtime_s") or {}).get("details")
        if not isinstance(details, dict) or "waited_s" not in details:
            return
        entries = [p.get("runtime_s") if isinstance(p.get("runtime_s"), Mapping) else {} for p in parts]
        waits = [e.get("details").get("waited_s") if isinstance(e.get("details"), Mapping) else None
                 for e in entries]  # a hand-edited details of another type: no waits, not a crash
        if all(isinstance(w, list) for w in waits):
            details["waited_s"] = [x for w in waits for x in w]
        if len(details.get("waited_s") or ()) != len(details.get("rounds_s") or ()):
            details.pop("waited_s")

    fold(s2st.get("metrics", {}), [s.get("metrics", {}) for s in sides])
    fold_waits(s2st.get("metrics", {}), [s.get("metrics", {}) for s in sides])
    for i, stage in enumerate(s2st.get("stages", [])):
        parts = [((s.get("stages") or [])[i:i + 1] or [{}])[0].get("metrics", {}) for s in sides]
        fold(stage.get("metrics", {}), parts)
        fold_waits(stage.get("metrics", {}), parts)
    return folded


def _unfoldable(bench: Mapping[str, Any], first: Mapping[str, Any], first_path: Path) -> str | None:
    """Why one run's row cannot fold with the first run's (s2st-merge --repeats), or None. Folding keeps the first
    run's row and makes each runtime the runs' statistic: a run whose row has no runtime to give would otherwise
    be dropped without a word, leaving "1 benchmark(s) from 3 run(s)" that is one run."""
    s2st, ours = ((b.get("extra_info") or {}).get("s2st") for b in (first, bench))
    if not s2st and not ours:
        return ("not an s2st row (no extra_info.s2st) in any run: --repeats folds s2st runtimes, and would keep "
                "one run of it and drop the others; merge such rows without --repeats")
    if not ours:
        return f"a plain pytest-benchmark row (no extra_info.s2st) where {first_path} holds an s2st row"
    if not s2st:
        return f"an s2st row where {first_path} holds a plain pytest-benchmark row (no extra_info.s2st)"
    differ = differences(work_of(s2st), work_of(ours))
    if differ:
        return f"not the same work as in {first_path} ({'; '.join(differ)}): repeats measure one workload"
    names = lambda s: [st.get("name") for st in s.get("stages") or []]  # noqa: E731
    if names(s2st) != names(ours):
        return f"stages {names(ours)} where {first_path} has {names(s2st)}"
    parts = [("extra_info.s2st.metrics", ours.get("metrics") or {})] + [
        (f"extra_info.s2st.stages[{i}].metrics", st.get("metrics") or {})
        for i, st in enumerate(ours.get("stages") or [])]
    for where, metrics in parts:
        entry = metrics.get("runtime_s")
        value = entry.get("value") if isinstance(entry, Mapping) else None
        if finite(value) is None or value < 0:
            what = "missing" if not isinstance(entry, Mapping) else \
                f"{_show_value(value)}" + (f" ({_show_reason(entry['reason'])})"
                                           if isinstance(entry.get("reason"), str) else "")
            return f"{where}.runtime_s.value is {what}, not a runtime in seconds: this run cannot fold with the others"
    return None


def _show_reason(reason: str) -> str:
    return show(reason, 120)


def _show_value(value: Any) -> str:
    return "null" if value is None else f"a JSON {_json_type(value)} {show(json.dumps(value), 40)}"


VERDICT_ORDER = ("FAIL", "ERROR", "INCONCLUSIVE", "PASS", "")


def fold_worker_payloads(payloads: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """--s2st-processes: every xdist worker ran every benchmark (--dist each). Their exports (plugin_xdist) become
    one: each benchmark's rows folded as repeat runs (fold_repeats; pytest-benchmark's own stats keep every run's
    rounds), each measurement likewise with the worst verdict of its runs; service levels and INCONCLUSIVEs
    are kept as they came."""
    rows: dict[str, list[dict[str, Any]]] = {}
    for payload in payloads:
        for row in payload.get("benchmarks", []):
            rows.setdefault(row["fullname"], []).append(row)
    benchmarks = []
    for group in rows.values():
        folded = fold_repeats(group)
        stats = folded.setdefault("stats", {})
        stats["data"] = [d for row in group for d in ((row.get("stats") or {}).get("data") or ())]
        benchmarks.append(folded)
    results: dict[str, list[list[Any]]] = {}
    for payload in payloads:
        for name, nodeid, measurement, verdict in payload["session"].get("results", []):
            results.setdefault(nodeid, []).append([name, nodeid, measurement, verdict])
    merged = []
    for group in results.values():
        measurement = fold_repeats([{"extra_info": {"s2st": m}} for _, _, m, _ in group])["extra_info"]["s2st"]
        verdict = min((v for *_, v in group), key=lambda v: VERDICT_ORDER.index(v) if v in VERDICT_ORDER else 0)
        merged.append([group[0][0], group[0][1], measurement, verdict])
    first = payloads[0]["session"] if payloads else {}
    return {"benchmarks": benchmarks,
            "session": {"results": merged,
                        "service": [s for p in payloads for s in p["session"].get("service", [])],
                        "inconclusive": [i for p in payloads for i in p["session"].get("inconclusive", [])],
                        "evidence_root": first.get("evidence_root")}}


def merge_saved_runs(paths: Sequence[str | Path], repeats: bool = False) -> dict[str, Any]:
    """One run holding every shard's rows; refuses (S2STError, one line) what cannot form one run:
    a different machine kind/Python or commit, another pytest-benchmark version, a row in two files.
    With ``repeats`` the files are repeat runs of the same benchmarks instead: each benchmark must be in every
    file once, and its rows fold into one (fold_repeats)."""
    if len(paths) < 2:
        raise S2STError("s2st-merge: give two or more saved runs (pytest-benchmark JSON files) to merge")
    runs = [(Path(p), load_saved_run(p)) for p in paths]
    first_path, first = runs[0]
    owner: dict[str, Path] = {}
    benchmarks: list[dict[str, Any]] = []
    shards = []
    for path, run in runs:
        differ = _differing(first["machine_info"], run["machine_info"], MACHINE_KEYS)
        if differ:
            raise S2STError(f"{path}: machine_info differs from {first_path} ({'; '.join(differ)}): "
                            "rows from different machine kinds are not one run")
        differ = _differing(first["commit_info"], run["commit_info"], COMMIT_KEYS)
        if differ:
            raise S2STError(f"{path}: commit_info differs from {first_path} ({'; '.join(differ)}): "
                            "shards of one run measure one commit")
        if run.get("version") != first.get("version"):
            raise S2STError(f"{path}: saved by pytest-benchmark {run.get('version')!r}, {first_path} by "
                            f"{first.get('version')!r}")
        if repeats:
            names = [b["fullname"] for b in run["benchmarks"]]
            first_names = [b["fullname"] for b in first["benchmarks"]]
            if sorted(names) != sorted(first_names) or len(set(names)) != len(names):
                other = (sorted(set(names) ^ set(first_names))[:3]
                         or sorted({n for n in names if names.count(n) > 1})[:3])
                raise S2STError(f"{path}: --repeats needs the same benchmarks once in every run; {first_path} "
                                f"differs from it in {', '.join(map(repr, other))}")
        for bench in ([] if repeats else run["benchmarks"]):
            name = bench["fullname"]
            if name in owner:
                where = "twice in it" if owner[name] == path else f"also in {owner[name]}"
                raise S2STError(f"{path}: benchmark {name!r} is {where} (do the shards overlap?)")
            owner[name] = path
            benchmarks.append(bench)
        shards.append({"file": path.name, "benchmarks": len(run["benchmarks"]), "datetime": run.get("datetime"),
                       "node": run["machine_info"].get("node"),
                       "cpu": _cpu_name(run["machine_info"].get("cpu"))})
    if repeats:
        by_name = [{b["fullname"]: b for b in run["benchmarks"]} for _, run in runs]
        for i, bench in enumerate(first["benchmarks"]):
            for (path, _), rows in zip(runs, by_name):
                why = _unfoldable(rows[bench["fullname"]], bench, first_path)
                if why:
                    raise S2STError(f"{path}: {bench['fullname'][:120]}: {why}")
        benchmarks = [fold_repeats([r[b["fullname"]] for r in by_name]) for b in first["benchmarks"]]
    machine_info = dict(first["machine_info"])
    machine_info["s2st_merged_from"] = shards  # where each shard ran (runners of a matrix may differ)
    return {
        "machine_info": machine_info,
        "commit_info": first["commit_info"],
        "benchmarks": benchmarks,
        "datetime": max(str(r.get("datetime") or "") for _, r in runs) or None,
        "version": first.get("version"),
    }
