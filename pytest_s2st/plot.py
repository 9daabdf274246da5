"""PNG of a case's service levels against concurrency (--s2st-plot DIR), one figure per case, six panels: TTFA and
RTF, error rate, throughput, playback underrun and inter-chunk gap. Every test is its own line (series), and a
quality baseline served beside the case (config ``quality.baseline``) is drawn on the same axes (dashed), so
baseline and candidate read on one scale. A percentile metric is a line through its p50 with a shaded band up to
its p90 and a dotted line at its p99; the error rate carries its 95% Wilson interval; throughput is one value per
level. Each level's x label carries its n (completed / measured requests, one per series); s2st_budget limits and
the config's goodput targets are drawn as lines. A panel whose metric has no value at any level says why instead of
staying blank; a panel of zeros gets an axis from 0 (not matplotlib's ±0.04 around nothing) and says so."""
from __future__ import annotations

import math
import re
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from .errors import S2STError
from .inputs import finite
from .runs import safe_name

STATS = ("p50", "p90", "p99")
# (metric, panel title, y unit, y top when every value is 0); a percentile metric plots STATS, a scalar one value
PANELS = (("ttfa_s", "time to first audio", "s", 0.1), ("rtf", "real-time factor (RTF)", "", 1.0),
          ("error_rate", "error rate", "%", 10.0), ("throughput", "throughput", "audio s per s", 1.0),
          ("underrun_s", "playback underrun", "s", 0.1), ("gap_s", "inter-chunk gap", "s", 0.1))
SCALE = {"error_rate": 100.0}  # a fraction shown in percent
BASELINE_SUFFIX = re.compile(r" \(baseline [^()]*\)$")  # session.add_service_level's name of a baseline row
WILSON_Z = 1.96


@dataclass
class Series:
    """One test's levels on one figure: its label, whether it is a quality baseline, its levels by concurrency."""
    label: str
    baseline: bool = False
    levels: list[dict] = field(default_factory=list)


def series_name(name: str, concurrency: Any) -> str:
    """A level's row name less its concurrency id (``test_x[case-c4]`` -> ``test_x[case]``, ``test_x[c4]`` ->
    ``test_x``): the levels of one test share it, so each test is one line however its levels interleave with
    another test's. A name without the id is its own series name."""
    hits = list(re.finditer(rf"(?<=[\[-])c{re.escape(str(concurrency))}(?=[\]-])", name))
    if not hits:
        return name
    m = hits[-1]
    head, tail = name[:m.start()], name[m.end():]
    if head.endswith("-"):
        head = head[:-1]
    elif tail.startswith("-"):
        tail = tail[1:]
    out = head + tail
    return out.replace("[]", "")


def figures(results: Iterable[tuple[Any, Mapping[str, Any]]]) -> dict[str, list[Series]]:
    """(row name, level data) pairs -> {case: its series}: a candidate's levels by test, and a baseline served
    beside it (a row named ``<candidate row> (baseline <case>)``, role baseline) on the candidate's figure."""
    rows = [(str(name), data) for name, data in results]
    case_of_row = {name: str(data["case"]) for name, data in rows if data.get("role") != "baseline"}
    out: dict[str, dict[tuple[str, bool], Series]] = {}
    for name, data in rows:
        baseline = data.get("role") == "baseline"
        own = BASELINE_SUFFIX.sub("", name) if baseline else name
        case = case_of_row.get(own, str(data["case"])) if baseline else str(data["case"])
        label = series_name(own, data.get("concurrency"))
        if baseline:
            label = f"{label} (baseline {data['case']})"
        series = out.setdefault(case, {}).setdefault((label, baseline), Series(label, baseline))
        series.levels = [d for d in series.levels if d.get("concurrency") != data.get("concurrency")] + [dict(data)]
    for groups in out.values():
        for series in groups.values():
            series.levels.sort(key=lambda d: d["concurrency"])
    return {case: list(groups.values()) for case, groups in sorted(out.items())}


def wilson(errors: int, n: int, z: float = WILSON_Z) -> tuple[float, float]:
    """The Wilson score interval of a proportion errors/n (n > 0)."""
    p = errors / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def panel_data(series: Series, metric: str) -> dict[str, list]:
    """What a panel plots for one series: x (concurrency), y (p50, or the value), low/high (the band: p50 to p90,
    or the error rate's Wilson interval; None where there is none) and p99 (percentile metrics), levels without
    a finite y left out. Scaled as drawn (SCALE)."""
    scale = SCALE.get(metric, 1.0)
    out: dict[str, list] = {"x": [], "y": [], "low": [], "high": [], "p99": []}
    for d in series.levels:
        s = d["summary"]
        value = s.get(metric)
        if isinstance(value, Mapping):
            y, band, top = finite(value.get("p50")), finite(value.get("p90")), finite(value.get("p99"))
            low, high = (y, band) if y is not None and band is not None else (None, None)
        else:
            y, top, low, high = finite(value), None, None, None
            n, n_ok = s.get("n"), s.get("n_ok")
            if metric == "error_rate" and y is not None and isinstance(n, int) and isinstance(n_ok, int) and n > 0:
                low, high = wilson(n - n_ok, n)
        if y is None:
            continue
        out["x"].append(d["concurrency"])
        out["y"].append(y * scale)
        out["low"].append(None if low is None else low * scale)
        out["high"].append(None if high is None else high * scale)
        out["p99"].append(None if top is None else top * scale)
    return out


def _limits(levels: list[dict], metric: str) -> list[tuple[str, float]]:
    """The horizontal lines of a panel: its s2st_budget keywords and the config's goodput target."""
    lines: dict[str, float] = {}
    scale = SCALE.get(metric, 1.0)
    for d in levels:
        for key, limit in (d.get("budgets") or {}).items():
            if (key == metric or key.startswith(metric + "_")) and finite(limit) is not None:
                lines[f"budget {key}"] = float(limit) * scale
        goodput = d["summary"].get("goodput")
        targets = goodput.get("targets") if isinstance(goodput, Mapping) else None
        if isinstance(targets, Mapping) and finite(targets.get(metric)) is not None:
            lines["goodput target"] = float(targets[metric]) * scale
    return sorted(lines.items())


def _draw(ax: Any, series: list[Series], metric: str, title: str, unit: str, zero_top: float) -> None:
    levels = [d for one in series for d in one.levels]
    xs = sorted({d["concurrency"] for d in levels})
    data = [(i, one, panel_data(one, metric)) for i, one in enumerate(series)]
    top = 0.0
    for i, one, pts in data:
        if not pts["x"]:
            continue
        color, style = f"C{i % 10}", "--" if one.baseline else "-"
        # clip_on=False: a value of 0 sits on the axis line, drawn on top of it, not hidden under it
        ax.plot(pts["x"], pts["y"], marker="o", color=color, linestyle=style, label=one.label, clip_on=False, zorder=3)
        band = [(x, lo, hi) for x, lo, hi in zip(pts["x"], pts["low"], pts["high"]) if lo is not None]
        if band:
            ax.fill_between([b[0] for b in band], [b[1] for b in band], [b[2] for b in band], color=color, alpha=0.15,
                            linewidth=0)
        p99 = [(x, v) for x, v in zip(pts["x"], pts["p99"]) if v is not None]
        if p99:
            ax.plot([p[0] for p in p99], [p[1] for p in p99], color=color, linestyle=":", linewidth=1, clip_on=False)
        top = max([top] + pts["y"] + [v for v in pts["high"] + pts["p99"] if v is not None])
        if metric == "throughput":  # the request rate each level achieved, in words beside its point
            for x, v in zip(pts["x"], pts["y"]):
                got = finite(next(d for d in one.levels if d["concurrency"] == x)["summary"].get("achieved_rate"))
                if got is not None:
                    ax.annotate(f"{got:.2f} req/s", (x, v), textcoords="offset points", xytext=(0, 8), ha="center",
                                fontsize=8)
    if metric == "rtf":  # the real-time line: above it the audio arrives slower than it plays
        ax.axhline(1.0, color="black", linestyle="--", linewidth=1, label="RTF = 1 (real time)")
        top = max(top, 1.0)
    suffix = {"s": " s", "%": "%"}.get(unit, "")
    for label, value in _limits(levels, metric):
        style = ("red", ":") if label.startswith("budget") else ("darkorange", "-.")
        ax.axhline(value, color=style[0], linestyle=style[1], linewidth=1.5, label=f"{label} = {value:g}{suffix}")
        top = max(top, value)
    ax.set_title(title)
    ax.set_ylabel(f"{title} ({unit})" if unit else title)
    ax.set_xlabel("concurrency (n: completed / measured requests" + (", per line)" if len(series) > 1 else ")"))
    ax.set_xticks(xs)
    ax.set_xticklabels([f"c={x}\nn=" + " | ".join(_n(one, x) for one in series) for x in xs])
    pad = 0.1 * (max(xs) - min(xs)) or 1  # room for the end points' labels
    ax.set_xlim(min(xs) - pad, max(xs) + pad)
    ax.grid(True, alpha=0.3)
    # every metric here is >= 0: the axis starts at 0; all zeros get a readable axis, not ±0.04 around nothing
    ax.set_ylim(0, top * 1.15 if top > 0 else zero_top)
    plotted = any(pts["x"] for _, _, pts in data)
    if plotted and top == 0:
        ax.text(0.5, 0.6, "0 at every level", ha="center", va="center", fontsize=9, transform=ax.transAxes)
    if not plotted:
        reasons = ((d["summary"].get("reasons") or {}) for d in levels)
        why = next((r[metric] for r in reasons if r.get(metric)), "no value at any level")
        ax.text(0.5, 0.5, textwrap.fill(f"n/a: {why}"[:240], 45), ha="center", va="center", fontsize=8,
                transform=ax.transAxes)
    if any(isinstance(d["summary"].get(metric), Mapping) for d in levels) and plotted:
        ax.text(0.01, 0.99, "line p50, band to p90, dotted p99", ha="left", va="top", fontsize=7,
                transform=ax.transAxes)
    elif metric == "error_rate" and plotted:
        ax.text(0.01, 0.99, "band: 95% Wilson interval", ha="left", va="top", fontsize=7, transform=ax.transAxes)
    if ax.get_legend_handles_labels()[1]:
        ax.legend(fontsize=7)


def _n(series: Series, concurrency: int) -> str:
    d = next((d for d in series.levels if d["concurrency"] == concurrency), None)
    return "-" if d is None else f"{d['summary'].get('n_ok', 0)}/{d['summary'].get('n', 0)}"


def plot_service(results: Iterable[tuple[Any, dict]], out_dir: str | Path) -> list[Path]:
    """One PNG per case into out_dir (created): its tests' levels and the baseline served beside it, overlaid."""
    try:
        import matplotlib  # lazy: optional

        matplotlib.use("Agg")  # files only, no display
        import matplotlib.pyplot as plt  # lazy: optional
    except ImportError as exc:
        raise S2STError("--s2st-plot needs matplotlib (install the plot extra: pip install -e '.[plot]' in the "
                        f"pytest-s2st clone): {exc}") from None
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for case, series in figures(results).items():
        fig = figure(plt, case, series)
        path = out / f"{safe_name(case)}.png"  # a case name is user data: one component under out
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    return written


def figure(plt: Any, case: str, series: "list[Series] | list[dict]") -> Any:
    """One case's figure: the six PANELS, in order, over its series (a plain list of levels: one series)."""
    if series and not isinstance(series[0], Series):
        series = [Series(case, levels=sorted(series, key=lambda d: d["concurrency"]))]
    fig, axes = plt.subplots(3, 2, figsize=(11, 12))
    for ax, panel in zip(axes.flat, PANELS):
        _draw(ax, series, *panel)
    fig.suptitle(f"{case}: service levels against concurrency"
                 + ("; dashed: the baseline" if any(one.baseline for one in series) else ""))
    fig.tight_layout()
    return fig
