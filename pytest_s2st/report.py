"""The extra table (memory and FLOPs beside pytest-benchmark's timings), and the comparison with a saved run as a
table (what it judges is judging.py's; the service table is report_service.py's). Every column comes from the
metric table (metrics.py)."""
from __future__ import annotations

import textwrap
from typing import Any, Callable, Mapping, Sequence

from .inputs import finite
from .judging import runtime_change, saved_counterpart, unlike_work
from .metrics import BY_NAME, INFERENCE_METRICS, column_format
from .metrics import format_value as fmt_metric  # name -> its table formatter
from .rows import Row, SavedMetric, SavedRow
from .runtime_stats import saved_statistic

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
    """The runtime's achieved precision (runner.relative_precision) and its rounds; '' when no rounds were kept."""
    details = metric.get("details") or {}
    if name != "runtime_s" or not isinstance(details, Mapping) or not details.get("rounds_s"):
        return ""
    from .significance import MIN_ROUNDS  # lazy: heavy

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
    threads = details.get("threads") if isinstance(details, Mapping) else None
    if name == "runtime_s" and isinstance(threads, int) and not isinstance(threads, bool):
        method += f", {threads} thread{'s' if threads != 1 else ''}"  # --s2st-threads: a runtime depends on it
    return method.removeprefix("timer:").replace("torch.utils.flop_counter", "torch")


WIDTH = 120  # every table a user sees fits a 120-column terminal (fit(): wider ones wrap their columns)


def table(header: Sequence[str], body: list[list[str]], left: int = 1) -> list[str]:
    """Columns two spaces apart: the first ``left`` (names, labels) left-aligned, the values right-aligned."""
    widths = _widths(header, body)
    line = lambda cells: "  ".join(c.ljust(w) if i < left else c.rjust(w)
                                   for i, (c, w) in enumerate(zip(cells, widths)))
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
    saved = [row.as_saved() for row in rows]
    formats = {key: column_format(key, [row.value(key) for row in saved]) for key, _ in columns}
    marks = method_marks(rows)
    precisions = [precision_cell(row) for row in saved]
    at = 2 if columns[0][0] == "runtime_s" else 1  # the interval follows the runtime
    header = ["Name"] + [title for _, title in columns]
    if any(precisions):
        header.insert(at, "95% CI")
    verdicts = any(row.status for row in rows)  # no budget, no verdict: no empty column
    header += ["methods"] * (len(set(marks.values())) > 1) + ["verdict"] * verdicts
    body = []
    for row, typed, precision in zip(rows, saved, precisions):
        cells = [row.name] + [cell(key, typed.metric(key), formats[key]) for key, _ in columns]
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
    return any(key in row.metrics for row in rows) and all(row.as_saved().value(key) is None for row in rows)


def method_marks(rows: Sequence[Row]) -> dict[str, str]:
    """Each distinct methods string of the rows -> its footnote mark (a, b, ...)."""
    distinct = list(dict.fromkeys(m for m in map(row_methods, rows) if m))
    return {m: chr(ord("a") + i) if i < 26 else str(i) for i, m in enumerate(distinct)}


def table_notes(rows: Sequence[Row]) -> list[str]:
    """The extra table's footnotes: what its 95% CI column means, and how each metric was measured (one line
    when every row was measured alike, else one per mark of the methods column)."""
    notes = []
    if any(precision_cell(row.as_saved()) for row in rows):
        notes.append(f"95% CI: the runtime {statistic_names(rows)}'s 95% confidence half-width, relative; n: timed "
                     f"rounds (an interval needs n >= {_min_rounds()})")
    shown = {key for key, _ in shown_columns(rows)}
    if "rss_rise_mib" in shown:
        notes.append(RSS_RISE_NOTE)
    for key, title in COLUMNS:
        if key not in shown and any(key in row.metrics for row in rows):
            stages = tuple(f"{row.name.strip()}: " for row in rows if row.name.startswith(" "))
            parts = (part.removeprefix(next((p for p in stages if part.startswith(p)), ""))  # a cascade's "s2u: ..."
                     for row in rows if key in row.metrics for part in row.as_saved().reason(key).split("; "))
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
    names = []
    for row in rows:
        try:
            names.append(row.as_saved().statistic())
        except ValueError:
            continue
    return "/".join(name + plural for name in dict.fromkeys(names or [saved_statistic(None)]))


def _min_rounds() -> int:
    from .significance import MIN_ROUNDS  # lazy: heavy

    return MIN_ROUNDS


def row_methods(row: Row) -> str:
    """The row's methods, one string (the footnote's): timer and protocol, memory method, FLOP counter..."""
    methods = [method_text(key, row.metrics[key]) for key in (m.name for m in INFERENCE_METRICS if m.show_method)
               if isinstance(row.metrics.get(key), Mapping)]
    return ", ".join(dict.fromkeys(methods))


def precision_cell(row: SavedRow) -> str:
    """'±4.5% n=5', '±22% n=5', 'n=2 too few', or '' when the row kept no timed rounds (a cascade's stage, an old
    run)."""
    details = row.details("runtime_s")
    if not details.get("rounds_s"):
        return ""
    n = len(details["rounds_s"])
    if n >= _min_rounds() and finite(details.get("precision")) is not None:
        pct = 100 * details["precision"]
        return f"±{pct:.1f}% n={n}" if pct < 10 else f"±{pct:.0f}% n={n}"
    return f"n={n} too few"


def cell(key: str, metric: SavedMetric | None, fmt: Callable[[float | None], str] | None = None) -> str:
    """A metric's table cell (in its column's unit when ``fmt`` is the column's format); a partial count (ops left
    uncounted: a lower bound) reads '>=7.884 M partial'."""
    value = metric.usable if metric is not None else None  # NaN, inf, a string: missing evidence (n/a), never 'nan'
    text = (fmt or (lambda v: fmt_metric(key, v)))(value)
    if value is not None and metric.details.get("partial"):
        return f">={text} partial"
    return text


def missing_notes(rows: Sequence[Row]) -> list[str]:
    """One line per n/a cell that says why (missing evidence is never a silent 0), and per partial cell what it
    left out."""
    from .measure.flops import uncounted_text  # lazy: plugin load

    notes = []
    for row in rows:
        saved = row.as_saved()
        for key, _ in COLUMNS:
            metric = saved.metric(key)
            if metric and metric.value is None and metric.reason and BY_NAME[key].note_missing:
                notes.append(f"{row.name.strip()}: {key} n/a: {metric.reason}")
            elif metric and metric.details.get("partial"):
                notes.append(f"{row.name.strip()}: {key} partial (a lower bound): no FLOP formula for "
                             f"{uncounted_text(metric.details)} (calls)")
    return list(dict.fromkeys(notes))


def wrap(lines: Sequence[str], width: int = 120) -> list[str]:
    """Notes under a table, each wrapped to the terminal width the tables keep (continuations indented)."""
    out: list[str] = []
    for line in lines:
        out += textwrap.wrap(line, width, subsequent_indent="    ", break_long_words=False,
                             break_on_hyphens=False) or [""]
    return out


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


def render_compare(rows: Sequence[Row], compared: Mapping[str, SavedRow], width: int = WIDTH) -> list[str]:
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
        new = row.as_saved()
        for key, _ in COLUMNS:
            new_v, old_v = new.value(key), old.value(key)
            change = runtime_change(old, new) if key == "runtime_s" and not other else None
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
