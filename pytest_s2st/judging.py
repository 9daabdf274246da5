"""Judging a run against a saved one, or an A/B's candidate against its baseline (pytest-free): which limits of
--s2st-compare-fail a change crossed, which could not be checked and why, and whether a runtime change is
significant. The tables that show the same rows are report.py's; every row is read typed (rows.py)."""
from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from .inputs import finite
from .limits import CompareLimit
from .metrics import format_value as fmt_metric  # name -> its table formatter
from .rows import Row, SavedRow, mapping
from .runtime_stats import own_times


def saved_counterpart(row: Row, compared: Mapping[str, SavedRow]) -> SavedRow | None:
    """The saved row of the same benchmark: by identity, else (runs saved before identities) by fullname."""
    old = compared.get(row.key) if row.key else None
    return compared.get(row.fullname) if old is None else old


def unlike_work(row: Row, old: SavedRow) -> list[str]:
    """How the saved row's work differs from this row's (work.differences); [] when alike or not known."""
    from .work import differences  # lazy: plugin load

    return differences(old.work, row.work) if old.work and row.work else []


def unlike_rows(rows: Sequence[Row], compared: Mapping[str, SavedRow]) -> list[str]:
    """One line per benchmark (not its stages) whose saved counterpart measured other work: no verdict for it."""
    out = []
    for row in rows:
        old = saved_counterpart(row, compared)
        why = unlike_work(row, old) if old is not None and not row.name.startswith(" ") else []
        if why:
            out.append(f"{row.fullname}: not the same work as the compared row ({'; '.join(why)}): no verdict")
    return out


def unmatched(rows: Sequence[Row], compared: Mapping[str, SavedRow]) -> list[str]:
    """Fullnames of the benchmarks (not their stage rows) that have no counterpart in the saved run."""
    return [row.fullname for row in rows if not row.name.startswith(" ") and saved_counterpart(row, compared) is None]


# ------------------------------------------------------------- the runtime: a change between runs, significant or not

def _run_means(row: SavedRow) -> list[float] | None:
    """The per-run runtimes of a row (each run's runtime statistic, runtime_stats.py): several after ``s2st-merge
    --repeats``, else its one run's (None when it kept no timed rounds: saved before rounds were)."""
    entry = row.metric("runtime_s")
    details = row.details("runtime_s")
    runs = details.get("runs_s")
    if runs:
        return list(runs) if isinstance(runs, (list, tuple)) else [runs]  # compare_runs judges each value
    rounds = details.get("rounds_s")
    if not rounds or entry is None or entry.value is None:
        return None
    from .significance import usable  # lazy: heavy

    if usable(rounds) is None:
        return list(rounds) if isinstance(rounds, (list, tuple)) else [rounds]  # compare_runs: not finite
    return [entry.value]


def runtime_change(old: SavedRow, new: SavedRow):
    """The significance of a runtime change between the runs of both sides (significance.compare_runs), or None
    when a side kept no timed rounds."""
    before, after = _run_means(old), _run_means(new)
    if not before or not after:
        return None
    from .significance import Change, compare_runs  # lazy: heavy

    name, why = runtime_statistic(old, new)
    if name is None:
        return Change(None, word=why, runs=(len(before), len(after)))
    own_before, own_after = _own_rounds(old), _own_rounds(new)
    if own_before is not None and own_after is not None:
        return compare_runs(before, after, own_before, own_after, own=True, name=name)
    return compare_runs(before, after, old.details("runtime_s").get("rounds_s"),
                        new.details("runtime_s").get("rounds_s"), name=name)


def runtime_statistic(old: SavedRow, new: SavedRow) -> tuple[str | None, str]:
    """(the statistic both sides' runtimes hold, ''), or (None, why they cannot be compared): one names none
    known, or they hold different ones (the mean of one run against the median of another says nothing)."""
    names = []
    for side, row in (("compared", old), ("current", new)):
        try:
            names.append(row.statistic())
        except ValueError as exc:
            return None, f"{side} run: {exc}"
    if names[0] != names[1]:
        return None, f"the compared run's runtime is the {names[0]}, the current run's the {names[1]}"
    return names[0], ""


def _own_rounds(row: SavedRow) -> list[float] | None:
    """A run's rounds less its thread's run-queue wait (measure/runqueue.py), or None without readings."""
    from .significance import usable  # lazy: heavy

    details = row.details("runtime_s")
    rounds, waits = usable(details.get("rounds_s")), usable(details.get("waited_s"))
    return own_times(rounds, waits) if rounds is not None and waits is not None else None


def _rounds_not_finite(old: SavedRow, new: SavedRow) -> bool:
    from .significance import NOT_FINITE  # lazy: heavy

    change = runtime_change(old, new)
    return change is not None and change.word == NOT_FINITE


def _significantly_slower(old: SavedRow, new: SavedRow) -> bool:
    """A runtime regression must be significant; runs saved without rounds cannot show that."""
    from .significance import SLOWER  # lazy: heavy

    change = runtime_change(old, new)
    return change is not None and change.word == SLOWER


# ---------------------------------------------------------------- --s2st-compare-fail against a saved run

def unmeasured_limits(metrics: SavedRow, limits: Iterable[CompareLimit]) -> list[str]:
    """One line per --s2st-compare-fail limit whose metric this run could not measure (the test's INCONCLUSIVE:
    nothing to check, said with the metric's own reason)."""
    return [f"limit {limit} not checked: {limit.metric} n/a: {metrics.reason(limit.metric)}"
            for limit in limits if metrics.value(limit.metric) is None]


def judge_limits(rows: Sequence[Row], compared: Mapping[str, SavedRow], limits: Iterable[CompareLimit],
                 faults: Mapping[str, str] | None = None, unmeasured_here: bool = True) -> tuple[list[str], list[str]]:
    """(crossed, unchecked): every limit crossed (a worsening past it, each metric's own way), and every benchmark
    or limit that could not be checked -- no counterpart, a counterpart that measured other work (unlike_work), a
    metric one side lacks. Unchecked is no pass and no regression either: its own word, never "regressed".
    ``faults``: {fullname: why its saved entry was unreadable}, said instead of "no counterpart".
    ``unmeasured_here`` False: a limit whose metric the current run lacks is left out (the pytest session
    makes that test INCONCLUSIVE with unmeasured_limits instead)."""
    limits = tuple(limits)
    faults = faults or {}
    crossed: list[str] = []
    unchecked = [f"{name}: {faults[name]}, so no limit was checked" if name in faults else
                 f"{name}: no counterpart in the compared run, so no limit was checked"
                 for name in unmatched(rows, compared)]
    for row in rows:
        old = saved_counterpart(row, compared)
        if old is None:
            continue
        other = unlike_work(row, old)
        if other:  # said once per benchmark, not per stage
            if not row.name.startswith(" "):
                unchecked.append(f"{row.fullname}: not the same work as the compared row ({'; '.join(other)}), "
                                 f"so no limit was checked")
            continue
        new = row.as_saved()
        for limit in limits:
            missing = [(side, saved) for side, saved in (("compared", old), ("current", new))
                       if saved.value(limit.metric) is None]
            if missing and not unmeasured_here and new.value(limit.metric) is None:
                continue
            if missing:  # a gate that could not look passes nothing: same rule as an unmatched row
                why = "; ".join(f"{side}: {saved.reason(limit.metric)}" for side, saved in missing)
                unchecked.append(f"{row.fullname}: {limit.metric} not measured in the "
                                 f"{' and '.join(s for s, _ in missing)} run ({why}), so limit {limit} was not checked")
                continue
            _, unlike = runtime_statistic(old, new) if limit.metric == "runtime_s" else (None, "")
            if unlike:
                unchecked.append(f"{row.fullname}: runtime_s not comparable ({unlike}), so limit {limit} was not "
                                 "checked")
                continue
            change = limit.exceeded(old.value(limit.metric), new.value(limit.metric))
            if change is None:
                continue
            if limit.metric == "runtime_s" and _rounds_not_finite(old, new):
                unchecked.append(f"{row.fullname}: runtime_s timed rounds are not finite numbers (missing evidence), "
                                 f"so limit {limit} was not checked")
                continue
            if limit.metric == "runtime_s" and not _significantly_slower(old, new):
                continue  # past the limit, but within what the rounds' spread allows: not a regression
            crossed.append(f"{row.fullname}: {limit.metric} regressed {limit.change_text(change)} "
                           f"({fmt_metric(limit.metric, old.value(limit.metric))} -> "
                           f"{fmt_metric(limit.metric, new.value(limit.metric))}{limit.direction()}), "
                           f"limit {limit}")
    return crossed, unchecked


def regressions(rows: Sequence[Row], compared: Mapping[str, SavedRow], limits: Iterable[CompareLimit],
                faults: Mapping[str, str] | None = None, unmeasured_here: bool = True) -> list[str]:
    """judge_limits' two lists as one: every line that fails a gate (crossed first)."""
    crossed, unchecked = judge_limits(rows, compared, limits, faults, unmeasured_here)
    return crossed + unchecked


def insignificant(rows: Sequence[Row], compared: Mapping[str, SavedRow], limits: Iterable[CompareLimit]) -> list[str]:
    """Runtime changes past a --s2st-compare-fail limit that were not failed, and why."""
    out = []
    for row in rows:
        old = saved_counterpart(row, compared)
        if old is not None and unlike_work(row, old):
            continue  # another workload: judge_limits says so, no note about a change
        new = row.as_saved()
        for limit in limits:
            if old is None or limit.metric != "runtime_s":
                continue
            if limit.exceeded(old.value("runtime_s"), new.value("runtime_s")) is None:
                continue
            if not _significantly_slower(old, new):
                change = runtime_change(old, new)
                why = change.describe() if change is not None else "no timed rounds saved on one side"
                out.append(f"{row.fullname}: runtime_s past {limit} but not a significant slowdown ({why})")
    return out


# ---------------------------------------------------------------- the in-process A/B (s2st_benchmark(..., baseline=))

def ab_change(s2st: Mapping[str, Any]):
    """The paired change a measurement's A/B saved (runner._paired_runtime), as a significance.Change; None
    when the benchmark had no baseline."""
    from .significance import Change  # lazy: heavy

    ab = s2st.get("ab")
    if not isinstance(ab, Mapping):
        return None
    num = lambda key: finite(ab.get(key))  # noqa: E731
    pairs = ab.get("pairs")
    return Change(num("ratio"), num("low"), num("high"), str(ab.get("word", "")),
                  pairs=pairs if isinstance(pairs, int) and not isinstance(pairs, bool) else 0)


def baseline_metrics(s2st: Mapping[str, Any]) -> Mapping[str, Any]:
    """The saved {metric: entry} of an A/B's baseline side ({} when it has none)."""
    return mapping(mapping(s2st.get("baseline")).get("metrics"))


def ab_limits(s2st: Mapping[str, Any], limits: Iterable[CompareLimit],
              against: str = "the baseline") -> tuple[list[str], list[str]]:
    """(crossed, unchecked) --s2st-compare-fail limits of one A/B benchmark, candidate against its baseline
    (``against`` names it in the lines: the A/B mode's word, ab.ABMode.against). The
    runtime limit is crossed when the paired ratio is past it and the paired interval says slower; a limit
    whose metric one side lacks, or an A/B without an interval, is unchecked (INCONCLUSIVE, never a pass)."""
    from .significance import SLOWER  # lazy: heavy

    change = ab_change(s2st)
    if change is None:
        return [], []
    old, new = SavedRow.from_metrics(baseline_metrics(s2st)), SavedRow.from_dict(s2st)
    crossed, unchecked = [], []
    for limit in limits:
        old_v, new_v = old.value(limit.metric), new.value(limit.metric)
        if limit.metric == "runtime_s":
            if change.ratio is None or change.low is None:
                unchecked.append(f"runtime_s: the A/B has no interval ({change.describe()}), so limit {limit} "
                                 "was not checked")
                continue
            if not limit.percent and (old_v is None or new_v is None):  # an absolute limit needs both values
                unchecked.append(f"runtime_s not measured on a side of the A/B, so limit {limit} was not checked")
                continue
            past = 100 * (change.ratio - 1) > limit.limit if limit.percent else new_v - old_v > limit.limit
            if past and change.word == SLOWER:
                crossed.append(f"runtime_s {change.describe()} against {against}, limit {limit}")
            continue
        if old_v is None or new_v is None:
            sides = " and ".join(side for side, v in (("baseline", old_v), ("candidate", new_v)) if v is None)
            why = "; ".join(f"{side}: {saved.reason(limit.metric)}" for side, saved, v in
                            (("baseline", old, old_v), ("candidate", new, new_v)) if v is None)
            unchecked.append(f"{limit.metric} not measured for the {sides} ({why}), so limit {limit} was not checked")
            continue
        amount = limit.exceeded(old_v, new_v)
        if amount is not None:
            crossed.append(f"{limit.metric} {fmt_metric(limit.metric, old_v)} -> {fmt_metric(limit.metric, new_v)} "
                           f"({limit.change_text(amount)}{limit.direction()}) against {against}, limit {limit}")
    return crossed, unchecked
