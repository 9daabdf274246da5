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
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from ..metrics import BY_NAME
from ..runs import safe_name
from .changes import ChangePoint
from .judge import Judged, absolute_key, judge
from .records import TOTAL, Verdict
from .store import SeriesKey, Store

SPARK_POINTS = 60
DOTS = 100  # runs drawn with a dot of their own (the newest); older ones are the line, unless marked
WIDTH, HEIGHT, PAD = 960, 240, 48
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


def _scale(lo: float, hi: float) -> Callable[[float], float]:
    if hi <= lo:
        hi, lo = lo + (abs(lo) or 1.0) * 0.05, lo - (abs(lo) or 1.0) * 0.05
    return lambda v: PAD / 2 + (HEIGHT - PAD) * (1 - (v - lo) / (hi - lo))


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
    y = _scale(min(lows), max(highs))
    step = (WIDTH - 2 * PAD) / max(1, len(values) - 1)
    x = [PAD + i * step for i in range(len(values))]
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" role="img" '
             f'aria-label="{html.escape(judged.key.label())}">']
    band = " ".join(f"{x[i]:.1f},{y(highs[i]):.1f}" for i in range(len(values)))
    band += " " + " ".join(f"{x[i]:.1f},{y(lows[i]):.1f}" for i in reversed(range(len(values))))
    parts.append(f'<polygon class="band" points="{band}" fill="#4a7bd0" fill-opacity="0.15" stroke="none"/>')
    line = " ".join(f"{x[i]:.1f},{y(v):.1f}" for i, v in enumerate(values))
    parts.append(f'<polyline class="series" points="{line}" fill="none" stroke="#4a7bd0" stroke-width="1.5"/>')
    for c in judged.changes:
        cx = (x[c.index - 1] + x[c.index]) / 2
        colour = "#b00020" if c.worse else "#1b7f3b"
        parts.append(f'<line class="change" data-index="{c.index}" x1="{cx:.1f}" x2="{cx:.1f}" y1="{PAD / 2}" '
                     f'y2="{HEIGHT - PAD / 2}" stroke="{colour}" stroke-width="2" stroke-dasharray="6,3"/>'
                     f'<text x="{cx + 4:.1f}" y="{PAD / 2 + 10}" style="fill:{colour}">x{c.ratio:.3f}</text>')
    alerted = {a.index for a in judged.alerts}
    # a dot (hover text, link to its commit) for the newest DOTS runs and every run something happened at: the
    # line and band carry the rest (1,000 runs x 16 series of dots made a 2.6 MiB page)
    changed = {i for c in judged.changes for i in (c.index - 1, c.index)}
    for i, (entry, v) in enumerate(zip(valued, values)):
        marks = [m for m in verdicts.get(entry.run_id, []) if m.verdict not in ("PASS", "no change", "same")]
        if i < len(values) - DOTS and i not in alerted and i not in changed and not marks:
            continue
        title = (f"{_short(entry.run.commit)} {entry.run.branch or ''} {entry.run.run_time[:19]}: "
                 f"{_fmt(metric, v)}" + (" (window alert)" if i in alerted else ""))
        colour = "#b00020" if i in alerted else "#4a7bd0"
        dot = (f'<circle class="{"alert" if i in alerted else "point"}" cx="{x[i]:.1f}" cy="{y(v):.1f}" r="3.5" '
               f'fill="{colour}"><title>{html.escape(title)}</title></circle>')
        if marks:
            text = ", ".join(f"{m.kind} {m.verdict}" for m in marks)
            dot += (f'<path class="verdict" d="M{x[i] - 5:.1f},{PAD / 2 - 8} l10,0 l-5,8 z" fill="#e08a00">'
                    f'<title>{html.escape(text)}</title></path>')
        url = _link(commit_url, entry.run.commit)
        parts.append(f'<a href="{html.escape(url)}">{dot}</a>' if url else dot)
    labels = max(1, len(values) // 12)
    for i in range(0, len(values), labels):
        parts.append(f'<text x="{x[i]:.1f}" y="{HEIGHT - 8}" text-anchor="middle">'
                     f'{html.escape(_short(valued[i].run.commit) if valued[i].run.commit else str(i + 1))}</text>')
    for v in (min(lows), max(highs)):
        parts.append(f'<text x="4" y="{y(v) + 4:.1f}">{html.escape(_fmt(metric, v))}</text>')
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
    out = [View(ALL, None, None)]
    for branch in store.branches():
        for machine in store.machines():
            out.append(View(f"{branch} @ {machine}", branch, machine))
    return out


def write_site(store: Store, out: str | os.PathLike, commit_url: str | None = None,
               views: Sequence[View] | None = None) -> list[Path]:
    """Writes the site; returns the pages written. ``commit_url``: a template with {commit}."""
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
            verdicts = store.verdicts(bench)
            charts, page_name = [], benchmark_page(view.name, bench).rsplit("/", 1)[1]
            for key in keys:
                anchor = absolute_key(key)
                judged = judge(key, store.series(key, view.branch, view.machine),
                               anchor=store.series(anchor, view.branch, view.machine) if anchor else None)
                if not judged.entries:
                    continue
                latest = _fmt(key.metric, judged.values[-1]) if judged.values else "n/a"
                flags = [f"{'worse' if c.worse else 'better'} x{c.ratio:.3f} at run {c.index + 1}"
                         for c in judged.changes]
                if judged.alerts and judged.alerts[-1].index == len(judged.values) - 1:
                    flags.append("newest value past the window threshold")
                bad = any(c.worse for c in judged.changes) or bool(flags and flags[-1].startswith("newest"))
                anchor = safe_name(f"{key.part}-{key.metric}-{key.statistic}")
                index_rows.append(
                    f'<tr><td><a href="{html.escape(page_name)}#{anchor}">{html.escape(bench)}</a></td>'
                    f'<td>{html.escape(key.part)}</td><td>{html.escape(key.metric)} {html.escape(key.statistic)}</td>'
                    f'<td>{html.escape(latest)}</td><td>{sparkline(judged.values, judged.changes)}</td>'
                    f'<td class="{"bad" if bad else ""}">{html.escape("; ".join(flags))}</td></tr>')
                charts.append(f'<div class="chart" id="{anchor}"><h3>{html.escape(key.part)} · '
                              f'{html.escape(key.metric)} {html.escape(key.statistic)}</h3>'
                              f'<p>{html.escape("; ".join(flags) or "no change point")}</p>'
                              f'{chart(judged, verdicts, commit_url)}</div>')
            written.append(_write(folder / page_name, _page(bench, _nav(views, view, 1), "".join(charts))))
        table = ("<table><tr><th>benchmark</th><th>part</th><th>metric</th><th>newest</th><th>trend</th>"
                 "<th>changes</th></tr>" + "".join(index_rows) + "</table>")
        written.append(_write(folder / "index.html", _page(f"history: {view.name}", _nav(views, view, 1), table)))
    return written


def _write(path: Path, text: str) -> Path:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return path

