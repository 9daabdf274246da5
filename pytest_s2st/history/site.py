"""The static trend site: plain HTML and inline SVG, no script library, no network (it opens from file://).

    <out>/index.html                         the views: one per (branch, machine) kept, and "all"
    <out>/<view>/index.html                  every benchmark of the view: each series' newest value, a sparkline
                                             and its change points / alerts
    <out>/<view>/<benchmark>.html            one chart per series: the values, their interval band, change
                                             points (dashed, with the ratio), window alerts (red) and the A/B and
                                             gate verdicts (marks above the point); each point links to its commit

A page never embeds another: the index carries sparklines of at most SPARK_POINTS points, a benchmark page
its own series, so the weight grows with one benchmark's history, not the whole database's.
"""
from __future__ import annotations

import html
import math
import os
from dataclasses import dataclass
from statistics import median
from pathlib import Path
from typing import Callable, Sequence

from ..metrics import BY_NAME
from ..runs import safe_name
from .changes import ChangePoint
from .judge import EXACT, Judged, absolute_key, judge
from .records import PAIRED, TOTAL, Verdict
from .protocol import Store
from .series import Entry, SeriesKey

SPARK_POINTS = 60
QUIET = ("PASS", "no change", "same", "no significant change")  # verdicts not marked above their point
DOTS = 100  # runs drawn with a dot of their own (the newest); older ones are the line, unless marked
WIDTH, HEIGHT, PAD = 960, 240, 64
ALL = "all"
_CSS = ("body{font:14px system-ui,sans-serif;margin:24px;color:#222}table{border-collapse:collapse}"
        "td,th{padding:4px 10px;border-bottom:1px solid #ddd;text-align:left}.bad{color:#b00020;font-weight:600}"
        ".chart{margin:18px 0 30px}svg text{font:11px system-ui,sans-serif;fill:#444}nav{margin-bottom:14px}")


@dataclass(frozen=True)
class View:
    name: str
    branch: str | None
    machine: str | None

    @property
    def folder(self) -> str:
        return safe_name(self.name)


def _fmt(metric: str, value: float) -> str:
    definition = BY_NAME.get(metric)
    return definition.format(value) if definition else f"{value:.4g}"


def _short(run_commit: str | None) -> str:
    return (run_commit or "")[:8] or "-"


def _link(template: str | None, commit: str | None) -> str | None:
    if not template or not commit:
        return None
    return template.replace("{commit}", commit)


MIN_SPAN = 0.10  # a y axis spans at least 10 % of the series' median: a 1 MiB wobble of 22 MiB never fills a chart
MAX_X_LABELS = (WIDTH - 2 * PAD) // 80  # commit labels at least 80 px apart: they never overlap


def _axis(lo: float, hi: float, median_value: float, noise: float = 0.0) -> tuple[float, float, list[float]]:
    """The y range (at least MIN_SPAN of the median, and 4x the metric's noise, about the data) and round ticks."""
    floor = max(MIN_SPAN * abs(median_value), 4 * noise)
    if hi - lo < floor or hi <= lo:
        middle = (hi + lo) / 2
        lo, hi = middle - (floor or abs(middle) or 1.0) / 2, middle + (floor or abs(middle) or 1.0) / 2
    raw = (hi - lo) / 4
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    first = math.ceil(lo / step) * step
    ticks = [first + i * step for i in range(int((hi - first) / step + 1e-9) + 1)]
    return lo, hi, ticks


def _scale(lo: float, hi: float) -> Callable[[float], float]:
    return lambda v: PAD / 2 + (HEIGHT - PAD) * (1 - (v - lo) / (hi - lo))


def _hover(entry: Entry, text: str) -> str:
    run = entry.run
    when = (run.commit_time or run.run_time or "")[:16].replace("T", " ")
    subject = f" {run.subject}" if run.subject else ""
    return f"{_short(run.commit)}{subject} · {when}{' · ' + run.branch if run.branch else ''}: {text}"


def chart(judged: Judged, verdicts: dict[int, list[Verdict]], commit_url: str | None) -> str:
    """One series as an SVG: x = the runs in order, y = the value; band = the measured interval."""
    valued, values, metric = judged.valued, judged.values, judged.key.metric
    if not values:
        return "<p>no value measured in this series (n/a every run)</p>"
    if judged.band is not None:
        lows, highs = judged.band
    else:
        lows = [e.point.low if e.point.low is not None else v for e, v in zip(valued, values)]
        highs = [e.point.high if e.point.high is not None else v for e, v in zip(valued, values)]
    definition = BY_NAME.get(metric)
    lo, hi, ticks = _axis(min(lows), max(highs), median(values), definition.noise if definition else 0.0)
    y = _scale(lo, hi)
    step = (WIDTH - 2 * PAD) / max(1, len(values) - 1)
    x = [PAD + i * step for i in range(len(values))]
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" role="img" '
             f'aria-label="{html.escape(judged.key.label())}">']
    for tick in ticks:  # round values, light grid lines
        parts.append(f'<line class="tick" x1="{PAD}" x2="{WIDTH - PAD / 2}" y1="{y(tick):.1f}" y2="{y(tick):.1f}" '
                     f'stroke="#e4e4e4"/><text x="{PAD - 4}" y="{y(tick) + 4:.1f}" text-anchor="end">'
                     f'{html.escape(_fmt(metric, tick))}</text>')
    band = " ".join(f"{x[i]:.1f},{y(highs[i]):.1f}" for i in range(len(values)))
    band += " " + " ".join(f"{x[i]:.1f},{y(lows[i]):.1f}" for i in reversed(range(len(values))))
    parts.append(f'<polygon class="band" points="{band}" fill="#4a7bd0" fill-opacity="0.15" stroke="none"/>')
    line = " ".join(f"{x[i]:.1f},{y(v):.1f}" for i, v in enumerate(values))
    parts.append(f'<polyline class="series" points="{line}" fill="none" stroke="#4a7bd0" stroke-width="1.5"/>')
    for c in judged.changes:
        cx = (x[c.index - 1] + x[c.index]) / 2 if c.index > 0 else x[0]
        colour = "#b00020" if c.worse else "#1b7f3b"
        parts.append(f'<line class="change" data-index="{c.index}" x1="{cx:.1f}" x2="{cx:.1f}" y1="{PAD / 2}" '
                     f'y2="{HEIGHT - PAD / 2}" stroke="{colour}" stroke-width="2" stroke-dasharray="6,3"/>'
                     f'<text x="{cx + 4:.1f}" y="{PAD / 2 + 10}" style="fill:{colour}">x{c.ratio:.3f}</text>')
    alerted = {a.index for a in judged.alerts}
    # a dot (hover text, link to its commit) for the newest DOTS runs and every run something happened at: the
    # line and band carry the rest (1,000 runs x 16 series of dots made a 2.6 MiB page)
    changed = {i for c in judged.changes for i in (c.index - 1, c.index)}
    for i, (entry, v) in enumerate(zip(valued, values)):
        marks = [m for m in verdicts.get(entry.run_id, []) if m.verdict not in QUIET]
        if i < len(values) - DOTS and i not in alerted and i not in changed and not marks:
            continue
        interval = (f" [{_fmt(metric, lows[i])}, {_fmt(metric, highs[i])}]" if lows[i] != highs[i] else "")
        title = _hover(entry, f"{_fmt(metric, v)}{interval}" + (" (window alert)" if i in alerted else ""))
        colour = "#b00020" if i in alerted else "#4a7bd0"
        dot = (f'<circle class="{"alert" if i in alerted else "point"}" cx="{x[i]:.1f}" cy="{y(v):.1f}" r="3.5" '
               f'fill="{colour}"><title>{html.escape(title)}</title></circle>')
        if marks:
            text = ", ".join(f"{m.kind} {m.verdict}" for m in marks)
            dot += (f'<path class="verdict" d="M{x[i] - 5:.1f},{PAD / 2 - 8} l10,0 l-5,8 z" fill="#e08a00">'
                    f'<title>{html.escape(text)}</title></path>')
        url = _link(commit_url, entry.run.commit)
        parts.append(f'<a href="{html.escape(url)}">{dot}</a>' if url else dot)
    every = max(1, math.ceil(len(values) / MAX_X_LABELS))
    for i in range(0, len(values), every):
        label = _short(valued[i].run.commit) if valued[i].run.commit else str(i + 1)
        parts.append(f'<text class="x" x="{x[i]:.1f}" y="{HEIGHT - 8}" text-anchor="middle">{html.escape(label)}'
                     f'<title>{html.escape(_hover(valued[i], _fmt(metric, values[i])))}</title></text>')
    parts.append("</svg>")
    return "".join(parts)


def sparkline(values: Sequence[float], changes: Sequence[ChangePoint]) -> str:
    tail = list(values[-SPARK_POINTS:])
    if not tail:
        return ""
    offset = len(values) - len(tail)
    lo, hi = min(tail), max(tail)
    span = (hi - lo) or 1.0
    w, h = 160, 28
    step = w / max(1, len(tail) - 1)
    pts = " ".join(f"{i * step:.1f},{h - 2 - (v - lo) / span * (h - 4):.1f}" for i, v in enumerate(tail))
    marks = "".join(f'<line x1="{(c.index - offset) * step:.1f}" x2="{(c.index - offset) * step:.1f}" y1="0" '
                    f'y2="{h}" stroke="{"#b00020" if c.worse else "#1b7f3b"}"/>'
                    for c in changes if c.index >= offset)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}">{marks}'
            f'<polyline points="{pts}" fill="none" stroke="#4a7bd0"/></svg>')


def _page(title: str, nav: str, body: str) -> str:
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f'<style>{_CSS}</style></head><body>{nav}<h1>{html.escape(title)}</h1>{body}</body></html>\n')


def _nav(views: Sequence[View], current: View | None, depth: int) -> str:
    up = "../" * depth
    options = "".join(f'<option value="{up}{html.escape(v.folder)}/index.html"'
                      f'{" selected" if current and v.name == current.name else ""}>{html.escape(v.name)}</option>'
                      for v in views)
    # a <select> that navigates: the filter by branch and machine, one static page per view
    return (f'<nav><a href="{up}index.html">views</a> · branch / machine: <select '
            f'onchange="location.href=this.value">{options}</select></nav>')


_METRIC_ORDER = {name: i for i, name in enumerate(BY_NAME)}


def _order(key: SeriesKey) -> tuple:
    """A benchmark's series as its table reads: the case's total first, then its stages and levels; metrics in the
    metric table's order."""
    return (key.benchmark, key.part != TOTAL, key.part, _METRIC_ORDER.get(key.metric, len(_METRIC_ORDER)),
            key.metric, key.statistic)


def benchmark_page(view_name: str, benchmark: str) -> str:
    """A benchmark's page, relative to the site's root (what links from elsewhere point at)."""
    return f"{View(view_name, None, None).folder}/{safe_name(benchmark)}.html"


def views_of(store: Store) -> list[View]:
    """"all", then each (branch, machine) that holds runs -- unless one such view holds every run: it would be
    "all" again, written twice."""
    groups = store.run_groups()
    out = [View(ALL, None, None)]
    if len(groups) == 1 and groups[0][0] is not None and groups[0][2] == store.run_count():
        return out
    out += [View(f"{branch} @ {machine}", branch, machine) for branch, machine, _ in groups if branch is not None]
    return out


@dataclass
class _Row:
    """One series on its benchmark's page: judged, its flags, and where it sorts."""
    key: SeriesKey
    judged: Judged
    flags: list[str]
    bad: bool

    @property
    def rank(self) -> tuple:
        """Exact-metric changes first, then worse changes and alerts, then the rest in the table's order."""
        exact = self.judged.method == EXACT and bool(self.judged.changes)
        return (not exact, not self.bad, _order(self.key))


def _judged_rows(store: Store, view: View, keys: list[SeriesKey]) -> list[_Row]:
    rows = []
    for key in keys:
        anchor = absolute_key(key)
        judged = judge(key, store.series(key, view.branch, view.machine),
                       anchor=store.series(anchor, view.branch, view.machine) if anchor else None)
        if not judged.entries:
            continue
        flags = [f"{'worse' if c.worse else 'better'} x{c.ratio:.3f} at run {c.index + 1}"
                 + (f"-{c.last + 1}" if c.last not in (None, c.index) else "") for c in judged.changes]
        newest_alert = bool(judged.alerts) and judged.alerts[-1].index == len(judged.values) - 1
        if newest_alert:
            flags.append("newest value past the window threshold")
        rows.append(_Row(key, judged, flags, any(c.worse for c in judged.changes) or newest_alert))
    return sorted(rows, key=lambda r: r.rank)


def _title(key: SeriesKey) -> str:
    what = "chained paired ratios (each commit against its parent), anchored to the mean" \
        if key.statistic == PAIRED else key.statistic
    return f"{key.part} · {key.metric} {what}".rstrip()


def _benchmark_page(bench: str, rows: list[_Row], verdicts: dict, commit_url: str | None) -> str:
    table = ["<table><tr><th>part</th><th>metric</th><th>newest</th><th>trend</th><th>changes</th></tr>"]
    charts = []
    for row in rows:
        anchor = safe_name(f"{row.key.part}-{row.key.metric}-{row.key.statistic}")
        latest = _fmt(row.key.metric, row.judged.values[-1]) if row.judged.values else "n/a"
        table.append(f'<tr><td>{html.escape(row.key.part)}</td><td><a href="#{anchor}">{html.escape(row.key.metric)} '
                     f'{html.escape(row.key.statistic)}</a></td><td>{html.escape(latest)}</td>'
                     f'<td>{sparkline(row.judged.values, row.judged.changes)}</td>'
                     f'<td class="{"bad" if row.bad else ""}">{html.escape("; ".join(row.flags))}</td></tr>')
        found = "; ".join(row.flags) or "no change point"
        charts.append(f'<div class="chart" id="{anchor}"><h3>{html.escape(_title(row.key))}</h3>'
                      f'<p><span class="{"bad" if row.bad else ""}">{html.escape(found)}</span>'
                      f' <small>({html.escape(row.judged.method)})</small></p>'
                      f'{chart(row.judged, verdicts, commit_url)}</div>')
    table.append("</table>")
    return "".join(table) + "".join(charts)


def write_site(store: Store, out: str | os.PathLike, commit_url: str | None = None,
               views: Sequence[View] | None = None) -> list[Path]:
    """Writes the site; returns the pages written. ``commit_url``: a template with {commit}. A view's index lists
    its benchmarks (one row each: how many series, which are flagged), each benchmark's page its series."""
    root = Path(out)
    views = list(views) if views is not None else views_of(store)
    written: list[Path] = []
    root.mkdir(parents=True, exist_ok=True)
    rows = "".join(f'<tr><td><a href="{html.escape(v.folder)}/index.html">{html.escape(v.name)}</a></td></tr>'
                   for v in views)
    written.append(_write(root / "index.html", _page("benchmark history", "", f"<table>{rows}</table>")))
    for view in views:
        folder = root / view.folder
        folder.mkdir(parents=True, exist_ok=True)
        by_bench: dict[str, list[SeriesKey]] = {}
        for key in sorted(store.keys(view.branch, view.machine), key=_order):
            by_bench.setdefault(key.benchmark, []).append(key)
        index_rows = []
        for bench, keys in by_bench.items():
            judged_rows = _judged_rows(store, view, keys)
            page_name = benchmark_page(view.name, bench).rsplit("/", 1)[1]
            body = _benchmark_page(bench, judged_rows, store.verdicts(bench), commit_url)
            written.append(_write(folder / page_name, _page(bench, _nav(views, view, 1), body)))
            flagged = [r for r in judged_rows if r.bad or (r.judged.method == EXACT and r.judged.changes)]
            summary = "; ".join(" ".join(filter(None, (r.key.part, r.key.metric, r.key.statistic))) + f": {r.flags[-1]}"
                                for r in flagged[:3]) + (f"; and {len(flagged) - 3} more" if len(flagged) > 3 else "")
            index_rows.append((not flagged, bench,
                               f'<tr><td><a href="{html.escape(page_name)}">{html.escape(bench)}</a></td>'
                               f'<td>{len(judged_rows)}</td><td class="{"bad" if flagged else ""}">{len(flagged)}</td>'
                               f'<td>{html.escape(summary)}</td></tr>'))
        table = ("<table><tr><th>benchmark</th><th>series</th><th>flagged</th><th>what changed</th></tr>"
                 + "".join(row for _, _, row in sorted(index_rows)) + "</table>")
        written.append(_write(folder / "index.html", _page(f"history: {view.name}", _nav(views, view, 1), table)))
    return written


def _write(path: Path, text: str) -> Path:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return path

