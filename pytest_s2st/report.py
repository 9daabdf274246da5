"""The extra table (memory and FLOPs beside pytest-benchmark's timings), the service table, and
comparison with saved runs. Every column comes from the metric table (metrics.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

from .inputs import finite, show
from .metrics import BY_NAME, INFERENCE_METRICS, SERVICE_METRICS, column_format
from .metrics import format_value as fmt_metric  # name -> its table formatter
from .limits import CompareLimit

# the inference columns, in table order (metrics.py holds titles, units and formats)
COLUMNS = tuple((m.name, m.title) for m in INFERENCE_METRICS if m.column)
RSS_RISE_NOTE = ("RSS rise: the peak RSS of the forward minus the process's RSS at the case's start (before its model "
                 "was built; a test's own callable: before the test's setup); the whole process's peak is "
                 "peak_rss_mib in the JSON")


def short_method(name: str, metric: Mapping[str, Any]) -> str:
    """How a metric was measured, with the runtime's achieved precision (the JSON's and compare's wording)."""
    method = method_text(name, metric)
    precision = precision_text(name, metric)
    if not precision:
        return method
    head, sep, tail = method.partition(", ")  # the precision follows the timer, before the protocol
    return f"{head} {precision}{sep}{tail}"


def precision_text(name: str, metric: Mapping[str, Any]) -> str:
    """The runtime's achieved precision (rounds.relative_precision) and its rounds; '' when no rounds were kept."""
    details = metric.get("details") or {}
    if name != "runtime_s" or not isinstance(details, Mapping) or not details.get("rounds_s"):
        return ""
    from .significance import MIN_ROUNDS

    n = len(details["rounds_s"])
    # below compare's minimum an interval says nothing (2 rounds gave "±762%"): say so instead, 1 round too
    if n >= MIN_ROUNDS and details.get("precision") is not None:
        return f"±{100 * details['precision']:.1f}% ({n} rounds)"
    return f"({n} round{'s' if n != 1 else ''}: too few for an interval)"


def method_text(name: str, metric: Mapping[str, Any]) -> str:
    """How a metric was measured, without the per-row precision: the same for every row measured alike."""
    method = str(metric.get("method", "?"))
    details = metric.get("details") or {}
    if name == "runtime_s" and isinstance(details, Mapping) and details.get("protocol"):
        method += f", {details['protocol']} protocol"
    return method.removeprefix("timer:").replace("torch.utils.flop_counter", "torch")


@dataclass
class Row:
    name: str          # test name, or "  <stage>" for a cascade's stage
    fullname: str      # pytest-benchmark's fullname (node id); stage rows add "::<stage>"
    metrics: Mapping[str, Mapping[str, Any]]  # metric -> Metric.to_dict()
    status: str = ""   # verdict of the test (PASS/FAIL/INCONCLUSIVE) or ""
    key: str = ""      # what compare matches on (identity, see rows_from); stage rows add "::<stage>"
    work: Mapping[str, Any] | None = None  # what the benchmark measured (work.work_of): a compare needs the same


def identity(s2st: Mapping[str, Any], fullname: str) -> str:
    """A saved benchmark's stable identity: the test file's name and the test's name with its case
    (``test_inference.py::test_inference[S2UT-tiny]``). Unlike pytest's node id it does not move with the
    rootdir, which pytest picks before plugin options exist (``--s2st-config /abs/x.yaml`` spelled with a
    space counts as a test path there). Runs saved before it existed fall back to the fullname."""
    return str(s2st.get("identity") or fullname)


def rows_from(name: str, fullname: str, s2st: Mapping[str, Any], status: str = "") -> list[Row]:
    from .work import work_of

    key = identity(s2st, fullname)
    work = work_of(s2st)
    rows = [Row(name, fullname, s2st.get("metrics", {}), status, key, work)]
    stages = s2st.get("stages", [])
    if len(stages) > 1:
        rows += [Row(f"  {st['name']}", f"{fullname}::{st['name']}", st.get("metrics", {}), "", f"{key}::{st['name']}",
                     work) for st in stages]
    return rows


WIDTH = 120  # every table a user sees fits a 120-column terminal (fit(): wider ones wrap their columns)


def table(header: Sequence[str], body: list[list[str]], left: int = 1) -> list[str]:
    """Columns two spaces apart: the first ``left`` (names, labels) left-aligned, the values right-aligned."""
    widths = _widths(header, body)
    line = lambda cells: "  ".join(c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))
    return [line(header), "-" * len(line(header))] + [line(r) for r in body]


def _widths(header: Sequence[str], body: list[list[str]]) -> list[int]:
    return [max(len(r[i]) for r in [list(header)] + body) for i in range(len(header))]


def fit(header: Sequence[str], body: list[list[str]], width: int = WIDTH, keep: int = 1) -> list[str]:
    """table(), within ``width`` columns: a wider table wraps, its columns after the first ``keep`` (the name)
    split into consecutive blocks of whole columns, each block a table of its own under the same first columns,
    one blank line between. A single column wider than the rest of the line stays whole (nothing is cut)."""
    lines = table(header, body, keep)
    if max(map(len, lines)) <= width or len(header) <= keep + 1:
        return lines
    widths = _widths(header, body)
    fixed = sum(widths[:keep]) + 2 * (keep - 1)
    blocks: list[list[int]] = [[]]
    used = fixed
    for i in range(keep, len(header)):
        if blocks[-1] and used + 2 + widths[i] > width:
            blocks.append([])
            used = fixed
        blocks[-1].append(i)
        used += 2 + widths[i]
    out: list[str] = []
    for block in blocks:
        cols = list(range(keep)) + block
        out += ([""] if out else []) + table([header[i] for i in cols], [[row[i] for i in cols] for row in body], keep)
    return out


def render_table(rows: Sequence[Row]) -> list[str]:
    """The extra table, one unit per column; its footnotes (table_notes) say how each metric was measured, once,
    instead of a methods column repeating one string on every row."""
    # a metric no row has at all was not asked for (e.g. instructions, off by default): no column of n/a
    columns = shown_columns(rows)
    formats = {key: column_format(key, [finite(_entry(row.metrics, key).get("value")) for row in rows])
               for key, _ in columns}
    marks = method_marks(rows)
    precisions = [precision_cell(row.metrics) for row in rows]
    at = 2 if columns[0][0] == "runtime_s" else 1  # the interval follows the runtime
    header = ["Name"] + [title for _, title in columns]
    if any(precisions):
        header.insert(at, "95% CI")
    verdicts = any(row.status for row in rows)  # no budget, no verdict: no empty column
    header += ["methods"] * (len(set(marks.values())) > 1) + ["verdict"] * verdicts
    body = []
    for row, precision in zip(rows, precisions):
        cells = [row.name] + [cell(key, _entry(row.metrics, key), formats[key]) for key, _ in columns]
        if any(precisions):
            cells.insert(at, precision)
        cells += [marks.get(row_methods(row), "")] * (len(set(marks.values())) > 1) + [row.status] * verdicts
        body.append(cells)
    return fit(header, body)


def shown_columns(rows: Sequence[Row]) -> list[tuple[str, str]]:
    """The metric columns of the extra table. A metric no row has at all was not asked for (instructions, off by
    default): no column of n/a. A metric whose n/a needs no per-row note (device peak on a cpu run) and that no row
    has a value for gets no column either: table_notes says why, once."""
    asked = [(key, title) for key, title in COLUMNS if any(key in row.metrics for row in rows)] or list(COLUMNS)
    return [(key, title) for key, title in asked if BY_NAME[key].note_missing or not _column_empty(rows, key)]


def _column_empty(rows: Sequence[Row], key: str) -> bool:
    """Measured (some row has the metric) and n/a on every row."""
    return any(key in row.metrics for row in rows) and all(_value(row.metrics, key) is None for row in rows)


def method_marks(rows: Sequence[Row]) -> dict[str, str]:
    """Each distinct methods string of the rows -> its footnote mark (a, b, ...)."""
    distinct = list(dict.fromkeys(m for m in map(row_methods, rows) if m))
    return {m: chr(ord("a") + i) if i < 26 else str(i) for i, m in enumerate(distinct)}


def table_notes(rows: Sequence[Row]) -> list[str]:
    """The extra table's footnotes: what its 95% CI column means, and how each metric was measured (one line
    when every row was measured alike, else one per mark of the methods column)."""
    notes = []
    if any(precision_cell(row.metrics) for row in rows):
        notes.append(f"95% CI: the runtime {statistic_names(rows)}'s 95% confidence half-width, relative; n: timed "
                     f"rounds (an interval needs n >= {_min_rounds()})")
    shown = {key for key, _ in shown_columns(rows)}
    if "rss_rise_mib" in shown:
        notes.append(RSS_RISE_NOTE)
    for key, title in COLUMNS:
        if key not in shown and any(key in row.metrics for row in rows):
            stages = tuple(f"{row.name.strip()}: " for row in rows if row.name.startswith(" "))
            parts = (part.removeprefix(next((p for p in stages if part.startswith(p)), ""))  # a cascade's "s2u: ..."
                     for row in rows if key in row.metrics for part in _reason(row.metrics, key).split("; "))
            why = "; ".join(dict.fromkeys(parts))
            notes.append(f"{title}: no column, n/a for every row: {why}")
    marks = method_marks(rows)
    if len(marks) == 1:
        notes.append(f"methods: {next(iter(marks))}")
    else:
        notes += [f"methods {mark}: {m}" for m, mark in marks.items()]
    return notes


def statistic_names(rows: Sequence[Row], plural: str = "") -> str:
    """The statistics the rows' runtimes hold (runtime_stats.saved_statistic, by name): 'mean', or 'mean/median';
    ``plural`` ('s') follows each name."""
    from .runtime_stats import saved_statistic

    names = []
    for row in rows:
        try:
            names.append(saved_statistic(_entry(row.metrics, "runtime_s")))
        except ValueError:
            continue
    return "/".join(name + plural for name in dict.fromkeys(names or [saved_statistic(None)]))


def _min_rounds() -> int:
    from .significance import MIN_ROUNDS

    return MIN_ROUNDS


def row_methods(row: Row) -> str:
    """The row's methods, one string (the footnote's): timer and protocol, memory method, FLOP counter..."""
    methods = [method_text(key, row.metrics[key]) for key in (m.name for m in INFERENCE_METRICS if m.show_method)
               if isinstance(row.metrics.get(key), Mapping)]
    return ", ".join(dict.fromkeys(methods))


def precision_cell(metrics: Mapping[str, Any]) -> str:
    """'±4.5% n=5', '±22% n=5', 'n=2 too few', or '' when the row kept no timed rounds (a cascade's stage, an old run)."""
    details = _entry(metrics, "runtime_s").get("details")
    if not isinstance(details, Mapping) or not details.get("rounds_s"):
        return ""
    n = len(details["rounds_s"])
    if n >= _min_rounds() and finite(details.get("precision")) is not None:
        pct = 100 * details["precision"]
        return f"±{pct:.1f}% n={n}" if pct < 10 else f"±{pct:.0f}% n={n}"
    return f"n={n} too few"


def cell(key: str, metric: Mapping[str, Any], fmt: Callable[[float | None], str] | None = None) -> str:
    """A metric's table cell (in its column's unit when ``fmt`` is the column's format); a partial count (ops left
    uncounted: a lower bound) reads '>=7.884 M partial'."""
    value = finite(metric.get("value"))  # NaN, inf, a string: missing evidence (n/a), never 'nan'
    text = (fmt or (lambda v: fmt_metric(key, v)))(value)
    details = metric.get("details")
    if value is not None and isinstance(details, Mapping) and details.get("partial"):
        return f">={text} partial"
    return text


def missing_notes(rows: Sequence[Row]) -> list[str]:
    """One line per n/a cell that says why (missing evidence is never a silent 0), and per partial cell what it
    left out."""
    from .measure.flops import uncounted_text

    notes = []
    for row in rows:
        for key, _ in COLUMNS:
            metric = row.metrics.get(key)
            if metric and metric.get("value") is None and metric.get("reason") and BY_NAME[key].note_missing:
                notes.append(f"{row.name.strip()}: {key} n/a: {metric['reason']}")
            elif metric and (metric.get("details") or {}).get("partial"):
                notes.append(f"{row.name.strip()}: {key} partial (a lower bound): no FLOP formula for "
                             f"{uncounted_text(metric['details'])} (calls)")
    return list(dict.fromkeys(notes))


def wrap(lines: Sequence[str], width: int = 120) -> list[str]:
    """Notes under a table, each wrapped to the terminal width the tables keep (continuations indented)."""
    import textwrap

    out: list[str] = []
    for line in lines:
        out += textwrap.wrap(line, width, subsequent_indent="    ", break_long_words=False,
                             break_on_hyphens=False) or [""]
    return out


def compared_rows(saved: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """A saved pytest-benchmark JSON benchmark entry -> {identity[::stage]: metrics}.
    A hand-edited entry of the wrong shape gives what it can; a part that is not an object is a row
    with no metrics, so a gate on it reports "not measured" instead of passing or crashing."""
    extra = saved.get("extra_info") if isinstance(saved, Mapping) else None
    s2st = extra.get("s2st") if isinstance(extra, Mapping) else None
    if not isinstance(s2st, Mapping) or not s2st:
        return {}
    from .work import work_of

    key = identity(s2st, str(saved.get("fullname")))
    work = work_of(s2st)
    out = {key: Saved(_mapping(s2st.get("metrics")), work)}
    stages = s2st.get("stages")
    for stage in stages if isinstance(stages, list) else []:
        if isinstance(stage, Mapping) and isinstance(stage.get("name"), str):
            out[f"{key}::{stage['name']}"] = Saved(_mapping(stage.get("metrics")), work)
    return out


class Saved(dict):
    """A saved row's metrics (a plain mapping to every reader) and, as ``work``, what it measured."""

    def __init__(self, metrics: Mapping[str, Any], work: Mapping[str, Any]) -> None:
        super().__init__(metrics)
        self.work = work


def unlike_work(row: Row, old: Mapping[str, Any]) -> list[str]:
    """How the saved row's work differs from this row's (work.differences); [] when alike or not known."""
    from .work import differences

    saved = getattr(old, "work", None)
    return differences(saved, row.work) if saved and row.work else []


def unlike_rows(rows: Sequence[Row], compared: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """One line per benchmark (not its stages) whose saved counterpart measured other work: no verdict for it."""
    out = []
    for row in rows:
        old = saved_counterpart(row, compared)
        why = unlike_work(row, old) if old is not None and not row.name.startswith(" ") else []
        if why:
            out.append(f"{row.fullname}: not the same work as the compared row ({'; '.join(why)}): no verdict")
    return out


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def saved_counterpart(row: Row, compared: Mapping[str, Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The saved metrics of the same benchmark: by identity, else (runs saved before identities) by fullname."""
    old = compared.get(row.key) if row.key else None
    return compared.get(row.fullname) if old is None else old


def _entry(metrics: Any, key: str) -> Mapping[str, Any]:
    entry = metrics.get(key) if isinstance(metrics, Mapping) else None
    return entry if isinstance(entry, Mapping) else {}


def _value(metrics: Mapping[str, Any], key: str) -> float | None:
    """The metric's value when it is usable evidence (inputs.finite); NaN, inf, a string -> None."""
    return finite(_entry(metrics, key).get("value"))


def _reason(metrics: Mapping[str, Any], key: str) -> str:
    entry = _entry(metrics, key)
    raw = entry.get("value")
    if raw is not None and finite(raw) is None:
        return f"value {show(repr(raw), 60)} is not a finite number (missing evidence)"
    return show(entry.get("reason") or ("not in the saved row" if not entry else "no value"))


def pct_change(old: float | None, new: float | None, key: str | None = None) -> str:
    """A change cell, in one vocabulary: a signed percent ('+12.5%', '-3.0%', '+0.0%' when equal); 'from 0' when
    the old value is 0 (no percent of 0); for a metric with a noise floor (RSS: the kernel's batched counters, the
    allocator's slack), a change below it reads '<1 MiB: noise' instead of a percent of a few KiB; 'n/a'."""
    if old is None or new is None:
        return "n/a"
    noise = BY_NAME[key].noise if key in BY_NAME else 0.0
    if noise and abs(new - old) < noise:
        unit = BY_NAME[key].unit
        return f"<{noise:g} {unit}: noise"
    if old == 0:
        return "+0.0%" if new == 0 else "from 0"
    return f"{100.0 * (new - old) / abs(old):+.1f}%"


def render_compare(rows: Sequence[Row], compared: Mapping[str, Mapping[str, Any]], width: int = WIDTH) -> list[str]:
    """Each benchmark with a saved counterpart: one row of "then -> now (change)" cells when that fits ``width``,
    else three stacked rows (then, now, change), one value per cell; a stacked table still too wide wraps its
    columns (fit). A column that is n/a on both sides for every row is left out."""
    titles = [title for _, title in COLUMNS]
    triples: list[tuple[str, list[tuple[str, str, str]]]] = []  # (name, [(then, now, change) per column])
    for row in rows:
        old = saved_counterpart(row, compared)
        if old is None:
            continue
        cells = []
        other = bool(unlike_work(row, old))  # another workload: values shown, no change claimed (unlike_rows says why)
        for key, _ in COLUMNS:
            new_v, old_v = _value(row.metrics, key), _value(old, key)
            change = runtime_change(old, row.metrics) if key == "runtime_s" and not other else None
            if new_v is None and old_v is None:
                cells.append(("n/a", "n/a", ""))
            elif other:
                cells.append((fmt_metric(key, old_v), fmt_metric(key, new_v), "other work"))
            else:
                cells.append((fmt_metric(key, old_v), fmt_metric(key, new_v),
                              change.short() if change is not None else pct_change(old_v, new_v, key)))
        triples.append((row.name, cells))
    if not triples:
        return []
    keep = [i for i in range(len(COLUMNS)) if any(cells[i][:2] != ("n/a", "n/a") for _, cells in triples)]
    header = ["Name"] + [titles[i] for i in keep]
    wide = [[name] + [f"{cells[i][0]} -> {cells[i][1]} ({cells[i][2]})" if cells[i][2] else "n/a" for i in keep]
            for name, cells in triples]
    stacked = []
    for name, cells in triples:
        stacked += [[name, "then"] + [cells[i][0] for i in keep], ["", "now"] + [cells[i][1] for i in keep],
                    ["", "change"] + [cells[i][2] for i in keep]]
    return one_line_or_stacked(table(header, wide), ["Name", ""] + header[1:], stacked, width)


def one_line_or_stacked(lines: list[str], stacked_header: list[str], stacked: list[list[str]], width: int) -> list[str]:
    """A compare-like table as rendered in one line per benchmark when that fits ``width``, else its stacked
    form (each benchmark as a few labelled rows, one value per cell), whose columns fit() wraps if still wide."""
    if max(map(len, lines)) <= width:
        return lines
    return fit(stacked_header, stacked, width, keep=2)


def compare_legend(means: str = "means") -> str:
    """The compare table's legend; ``means`` names the statistic the runs hold (statistic_names)."""
    return (f"runtime: new/old ratio of per-run {means}; a word (slower/faster) needs 3 runs per side "
            f"(s2st-merge --repeats), judged by a Welch 95% interval on log run {means}; other columns: plain change")


def _rounds(metrics: Mapping[str, Any], key: str) -> Any:
    details = _entry(metrics, key).get("details")
    return details.get("rounds_s") if isinstance(details, Mapping) else None


def _run_means(metrics: Mapping[str, Any]) -> list[float] | None:
    """The per-run runtimes of a row (each run's runtime statistic, runtime_stats.py): several after ``s2st-merge
    --repeats``, else its one run's (None when it kept no timed rounds: saved before rounds were)."""
    entry = _entry(metrics, "runtime_s")
    details = entry.get("details")
    runs = details.get("runs_s") if isinstance(details, Mapping) else None
    if runs:
        return list(runs) if isinstance(runs, (list, tuple)) else [runs]  # compare_runs judges each value
    rounds = _rounds(metrics, "runtime_s")
    if not rounds or entry.get("value") is None:
        return None
    from .significance import usable

    if usable(rounds) is None:
        return list(rounds) if isinstance(rounds, (list, tuple)) else [rounds]  # compare_runs: not finite
    return [entry["value"]]


def runtime_change(old: Mapping[str, Any], new: Mapping[str, Any]):
    """The significance of a runtime change between the runs of both sides (significance.compare_runs), or None
    when a side kept no timed rounds."""
    before, after = _run_means(old), _run_means(new)
    if not before or not after:
        return None
    from .significance import Change, compare_runs

    name, why = runtime_statistic(old, new)
    if name is None:
        return Change(None, word=why, runs=(len(before), len(after)))
    own_before, own_after = _own_rounds(old), _own_rounds(new)
    if own_before is not None and own_after is not None:
        return compare_runs(before, after, own_before, own_after, own=True, name=name)
    return compare_runs(before, after, _rounds(old, "runtime_s"), _rounds(new, "runtime_s"), name=name)


def runtime_statistic(old: Mapping[str, Any], new: Mapping[str, Any]) -> tuple[str | None, str]:
    """(the statistic both sides' runtimes hold, ''), or (None, why they cannot be compared): one names none
    known, or they hold different ones (the mean of one run against the median of another says nothing)."""
    from .runtime_stats import saved_statistic

    names = []
    for side, metrics in (("compared", old), ("current", new)):
        try:
            names.append(saved_statistic(_entry(metrics, "runtime_s")))
        except ValueError as exc:
            return None, f"{side} run: {exc}"
    if names[0] != names[1]:
        return None, f"the compared run's runtime is the {names[0]}, the current run's the {names[1]}"
    return names[0], ""


def _own_rounds(metrics: Mapping[str, Any]) -> list[float] | None:
    """A run's rounds less its thread's run-queue wait (measure/runqueue.py), or None without readings."""
    from .measure.runqueue import own_times
    from .significance import usable

    details = _entry(metrics, "runtime_s").get("details")
    if not isinstance(details, Mapping):
        return None
    rounds, waits = usable(details.get("rounds_s")), usable(details.get("waited_s"))
    return own_times(rounds, waits) if rounds is not None and waits is not None else None


def unmatched(rows: Sequence[Row], compared: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Fullnames of the benchmarks (not their stage rows) that have no counterpart in the saved run."""
    return [row.fullname for row in rows if not row.name.startswith(" ") and saved_counterpart(row, compared) is None]


def unmeasured_limits(metrics: Mapping[str, Any], limits: Iterable[CompareLimit]) -> list[str]:
    """One line per --s2st-compare-fail limit whose metric this run could not measure (the test's INCONCLUSIVE:
    nothing to check, said with the metric's own reason)."""
    return [f"limit {limit} not checked: {limit.metric} n/a: {_reason(metrics, limit.metric)}"
            for limit in limits if _value(metrics, limit.metric) is None]


def judge_limits(rows: Sequence[Row], compared: Mapping[str, Mapping[str, Any]], limits: Iterable[CompareLimit],
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
        for limit in limits:
            missing = [(side, metrics) for side, metrics in (("compared", old), ("current", row.metrics))
                       if _value(metrics, limit.metric) is None]
            if missing and not unmeasured_here and _value(row.metrics, limit.metric) is None:
                continue
            if missing:  # a gate that could not look passes nothing: same rule as an unmatched row
                why = "; ".join(f"{side}: {_reason(metrics, limit.metric)}" for side, metrics in missing)
                unchecked.append(f"{row.fullname}: {limit.metric} not measured in the "
                                 f"{' and '.join(s for s, _ in missing)} run ({why}), so limit {limit} was not checked")
                continue
            _, unlike = runtime_statistic(old, row.metrics) if limit.metric == "runtime_s" else (None, "")
            if unlike:
                unchecked.append(f"{row.fullname}: runtime_s not comparable ({unlike}), so limit {limit} was not "
                                 "checked")
                continue
            change = limit.exceeded(_value(old, limit.metric), _value(row.metrics, limit.metric))
            if change is None:
                continue
            if limit.metric == "runtime_s" and _rounds_not_finite(old, row.metrics):
                unchecked.append(f"{row.fullname}: runtime_s timed rounds are not finite numbers (missing evidence), "
                                 f"so limit {limit} was not checked")
                continue
            if limit.metric == "runtime_s" and not _significantly_slower(old, row.metrics):
                continue  # past the limit, but within what the rounds' spread allows: not a regression
            crossed.append(f"{row.fullname}: {limit.metric} regressed {limit.change_text(change)} "
                           f"({fmt_metric(limit.metric, _value(old, limit.metric))} -> "
                           f"{fmt_metric(limit.metric, _value(row.metrics, limit.metric))}{limit.direction()}), "
                           f"limit {limit}")
    return crossed, unchecked


def regressions(rows: Sequence[Row], compared: Mapping[str, Mapping[str, Any]], limits: Iterable[CompareLimit],
                faults: Mapping[str, str] | None = None, unmeasured_here: bool = True) -> list[str]:
    """judge_limits' two lists as one: every line that fails a gate (crossed first)."""
    crossed, unchecked = judge_limits(rows, compared, limits, faults, unmeasured_here)
    return crossed + unchecked


def _rounds_not_finite(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    from .significance import NOT_FINITE

    change = runtime_change(old, new)
    return change is not None and change.word == NOT_FINITE


def _significantly_slower(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """A runtime regression must be significant; runs saved without rounds cannot show that."""
    from .significance import SLOWER

    change = runtime_change(old, new)
    return change is not None and change.word == SLOWER


def insignificant(rows: Sequence[Row], compared: Mapping[str, Mapping[str, Any]], limits: Iterable[CompareLimit]) -> list[str]:
    """Runtime changes past a --s2st-compare-fail limit that were not failed, and why."""
    out = []
    for row in rows:
        old = saved_counterpart(row, compared)
        if old is not None and unlike_work(row, old):
            continue  # another workload: judge_limits says so, no note about a change
        for limit in limits:
            if old is None or limit.metric != "runtime_s":
                continue
            if limit.exceeded(_value(old, "runtime_s"), _value(row.metrics, "runtime_s")) is None:
                continue
            if not _significantly_slower(old, row.metrics):
                change = runtime_change(old, row.metrics)
                why = change.describe() if change is not None else "no timed rounds saved on one side"
                out.append(f"{row.fullname}: runtime_s past {limit} but not a significant slowdown ({why})")
    return out


def _in_service_table(m: Any) -> bool:
    """A statistic-metric shows the stats it names in table_stats; one naming none is JSON and budgets only."""
    return bool(m.table_stats) or not m.stats


# the service table is two tables of at most ~120 columns: latency, then playback and load; every statistic
# (means, p90s, underrun events, dry spells, audio seconds) stays in the JSON's summary
SERVICE_TABLES = (("latency", ("ttfa_s", "rtf", "latency_s", "error_rate")),
                  ("playback and load", ("underrun_s", "continuity_rate", "gap_s", "throughput")))


def _service_cells(m: Any, s: Mapping[str, Any]) -> list[float | None]:
    value = s.get(m.name)
    if m.table_stats:
        return [finite(value.get(stat)) if isinstance(value, Mapping) else None for stat in m.table_stats]
    return [finite(value)]


def render_service_table(results: Sequence[tuple[str, Mapping[str, Any]]]) -> list[str]:
    """(row name, level data) pairs -> the service tables (one unit per column; metric columns from the metric
    table), then notes: what the rate and goodput columns mean and why a shown value is n/a."""
    out: list[str] = []
    for part, names in SERVICE_TABLES:
        shown = [BY_NAME[n] for n in names if _in_service_table(BY_NAME[n])]
        header = ["Name", "conc", "ok/n"] if part == "latency" else ["Name", "conc"]
        for m in shown:
            header += [f"{m.title} {st}" if i == 0 else st for i, st in enumerate(m.table_stats)] or [m.title]
        header += ["goodput"] if part == "latency" else ["rate asked", "rate got"]
        columns = {m.name: list(zip(*[_service_cells(m, data["summary"]) for _, data in results])) for m in shown}
        formats = {name: [column_format(name, col) for col in cols] for name, cols in columns.items()}
        body = []
        for name, data in results:
            s = data["summary"]
            cells = [name, str(data["concurrency"])]
            if part == "latency":
                cells.append(f"{s.get('n_ok', 0)}/{s.get('n', 0)}")
            for m in shown:
                cells += [fmt(v) for fmt, v in zip(formats[m.name], _service_cells(m, s))]
            if part == "latency":
                goodput = (s.get("goodput") or {}).get("fraction") if isinstance(s.get("goodput"), Mapping) else None
                cells.append("n/a" if finite(goodput) is None else f"{100 * goodput:.0f}%")
            else:
                cells += list(_rates(s))
            body.append(cells)
        out += ([""] if out else []) + fit(header, body)
    return out + wrap(service_legend(results) + service_missing_notes(results))


def _rates(summary: Mapping[str, Any]) -> tuple[str, str]:
    """The request rate asked ('closed loop', or the open-loop rate) and achieved (measured requests / wall)."""
    asked, got = summary.get("request_rate", "inf"), finite(summary.get("achieved_rate"))
    try:
        closed = asked in ("inf", None) or float(asked) == float("inf")
    except (TypeError, ValueError):
        closed = True
    asked_text = "closed loop" if closed else f"{float(asked):g} req/s"
    return asked_text, "n/a" if got is None else f"{got:.2f} req/s"


def service_legend(results: Sequence[tuple[str, Mapping[str, Any]]]) -> list[str]:
    """What the columns that are not one metric's statistic mean."""
    if not results:
        return []
    return ["ok/n: completed / measured requests; throughput: audio seconds per wall second",
            "goodput: requests meeting every target of the config's general.targets / measured requests",
            "rate asked: closed loop (each worker sends its next request when its last ends) or the open-loop rate",
            "rate got: measured requests sent / wall seconds; means, p90s and the other statistics: the JSON summary"]


def service_missing_notes(results: Sequence[tuple[str, Mapping[str, Any]]]) -> list[str]:
    """Why a shown service value is n/a for a level whose requests did complete (never a silent blank); a reason
    shared by every such level is one line."""
    found: dict[tuple[str, str], list[str]] = {}
    completed = [name for name, data in results if data["summary"].get("n_ok")]
    for name, data in results:
        s = data["summary"]
        if not s.get("n_ok"):
            continue  # nothing completed: the ok/n column already says it
        reasons = s.get("reasons") or {}
        for m in SERVICE_METRICS:
            if not _in_service_table(m) or m.name not in reasons:
                continue
            if any(v is None for v in _service_cells(m, s)):
                found.setdefault((m.name, str(reasons[m.name])), []).append(name)
        goodput = s.get("goodput")
        if finite(goodput.get("fraction") if isinstance(goodput, Mapping) else None) is None:
            found.setdefault(("goodput", str(reasons.get("goodput", "no value"))), []).append(name)
        if finite(s.get("achieved_rate")) is None and "achieved_rate" in reasons:
            found.setdefault(("rate got", str(reasons["achieved_rate"])), []).append(name)
    notes = []
    for (metric, reason), names in found.items():
        where = "every level" if len(names) == len(completed) > 1 else ", ".join(names)
        notes.append(f"{where}: {metric} n/a: {reason}")
    return notes


# ---------------------------------------------------------------- the in-process A/B (s2st_benchmark(..., baseline=))

def ab_change(s2st: Mapping[str, Any]):
    """The paired change a measurement's A/B saved (runner._paired_runtime), as a significance.Change; None
    when the benchmark had no baseline."""
    from .significance import Change

    ab = s2st.get("ab")
    if not isinstance(ab, Mapping):
        return None
    num = lambda key: finite(ab.get(key))  # noqa: E731
    pairs = ab.get("pairs")
    return Change(num("ratio"), num("low"), num("high"), str(ab.get("word", "")),
                  pairs=pairs if isinstance(pairs, int) and not isinstance(pairs, bool) else 0)


def _baseline_metrics(s2st: Mapping[str, Any]) -> Mapping[str, Any]:
    return _mapping(_mapping(s2st.get("baseline")).get("metrics"))


def ab_limits(s2st: Mapping[str, Any], limits: Iterable[CompareLimit]) -> tuple[list[str], list[str]]:
    """(crossed, unchecked) --s2st-compare-fail limits of one A/B benchmark, candidate against its baseline. The
    runtime limit is crossed when the paired ratio is past it and the paired interval says slower; a limit
    whose metric one side lacks, or an A/B without an interval, is unchecked (INCONCLUSIVE, never a pass)."""
    from .significance import SLOWER

    change = ab_change(s2st)
    if change is None:
        return [], []
    old, new = _baseline_metrics(s2st), _mapping(s2st.get("metrics"))
    crossed, unchecked = [], []
    against = "the base" if _mapping(s2st.get("ab")).get("mode") == "code versions" else "the baseline"
    for limit in limits:
        old_v, new_v = _value(old, limit.metric), _value(new, limit.metric)
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
            why = "; ".join(f"{side}: {_reason(m, limit.metric)}" for side, m, v in
                            (("baseline", old, old_v), ("candidate", new, new_v)) if v is None)
            unchecked.append(f"{limit.metric} not measured for the {sides} ({why}), so limit {limit} was not checked")
            continue
        amount = limit.exceeded(old_v, new_v)
        if amount is not None:
            crossed.append(f"{limit.metric} {fmt_metric(limit.metric, old_v)} -> {fmt_metric(limit.metric, new_v)} "
                           f"({limit.change_text(amount)}{limit.direction()}) against {against}, limit {limit}")
    return crossed, unchecked
