"""PNG of a case's service levels against concurrency (--s2st-plot DIR), one figure per case, six panels: TTFA and
RTF percentiles (RTF = 1, the real-time line, drawn), error rate, throughput, playback underrun and inter-chunk gap.
Each level's x label carries its n (completed / measured requests); s2st_budget limits and the config's goodput
targets are drawn as lines. A panel whose metric has no value at any level says why instead of staying blank; a
panel of zeros gets an axis from 0 (not matplotlib's ±0.04 around nothing) and says so."""
from __future__ import annotations

import textwrap
from collections import defaultdict
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


def _series(levels: list[dict], metric: str) -> dict[str, list[tuple[int, float]]]:
    """label -> [(concurrency, value)] of the levels that have a finite value."""
    out: dict[str, list[tuple[int, float]]] = {}
    scale = SCALE.get(metric, 1.0)
    for d in levels:
        value = d["summary"].get(metric)
        for stat, v in (value.items() if isinstance(value, Mapping) else [("", value)]):
            if isinstance(value, Mapping) and stat not in STATS:
                continue
            v = finite(v)
            if v is not None:
                out.setdefault(stat or metric, []).append((d["concurrency"], v * scale))
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


def _draw(ax: Any, levels: list[dict], metric: str, title: str, unit: str, zero_top: float) -> None:
    xs = [d["concurrency"] for d in levels]
    series = _series(levels, metric)
    for label, pts in series.items():
        # clip_on=False: a value of 0 sits on the axis line, drawn on top of it, not hidden under it
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label if label != metric else None,
                clip_on=False, zorder=3)
    if metric == "throughput":  # the request rate each level achieved, in words beside its point
        for x, v in series.get(metric, []):
            got = finite(next(d for d in levels if d["concurrency"] == x)["summary"].get("achieved_rate"))
            if got is not None:
                ax.annotate(f"{got:.2f} req/s", (x, v), textcoords="offset points", xytext=(0, 8), ha="center",
                            fontsize=8)
    top = max((v for pts in series.values() for _, v in pts), default=0.0)
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
    ax.set_xlabel("concurrency (n: completed / measured requests)")
    ax.set_xticks(xs)
    ax.set_xticklabels([f"c={d['concurrency']}\nn={d['summary'].get('n_ok', 0)}/{d['summary'].get('n', 0)}"
                        for d in levels])
    pad = 0.1 * (max(xs) - min(xs)) or 1  # room for the end points' labels
    ax.set_xlim(min(xs) - pad, max(xs) + pad)
    ax.grid(True, alpha=0.3)
    # every metric here is >= 0: the axis starts at 0; all zeros get a readable axis, not ±0.04 around nothing
    ax.set_ylim(0, top * 1.15 if top > 0 else zero_top)
    if series and top == 0:
        ax.text(0.5, 0.6, "0 at every level", ha="center", va="center", fontsize=9, transform=ax.transAxes)
    if not series:
        reasons = ((d["summary"].get("reasons") or {}) for d in levels)
        why = next((r[metric] for r in reasons if r.get(metric)), "no value at any level")
        ax.text(0.5, 0.5, textwrap.fill(f"n/a: {why}"[:240], 45), ha="center", va="center", fontsize=8,
                transform=ax.transAxes)
    if ax.get_legend_handles_labels()[1]:
        ax.legend(fontsize=8)


def plot_service(results: Iterable[tuple[Any, dict]], out_dir: str | Path) -> list[Path]:
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only, no display
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise S2STError(f"--s2st-plot needs matplotlib (install the plot extra: pip install -e '.[plot]' in the pytest-s2st clone): {exc}") from None
    by_case: dict[str, list[dict]] = defaultdict(list)
    for _, data in results:
        by_case[data["case"]].append(data)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for case, levels in sorted(by_case.items()):
        levels.sort(key=lambda d: d["concurrency"])
        fig = figure(plt, case, levels)
        path = out / f"{safe_name(case)}.png"  # a case name is user data: one component under out
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    return written


def figure(plt: Any, case: str, levels: list[dict]) -> Any:
    """One case's figure: the six PANELS, in order, over its levels (sorted by concurrency)."""
    fig, axes = plt.subplots(3, 2, figsize=(11, 12))
    for ax, panel in zip(axes.flat, PANELS):
        _draw(ax, levels, *panel)
    fig.suptitle(f"{case}: service levels against concurrency")
    fig.tight_layout()
    return fig
