"""PNG of TTFA, RTF, playback-underrun and inter-chunk-gap percentiles against concurrency, one figure per
case (--s2st-plot DIR). A panel whose metric has no value at any level says so instead of staying blank."""
from __future__ import annotations

import textwrap
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable

from .errors import S2STError
from .runs import safe_name

STATS = ("p50", "p90", "p99")
PANELS = (("ttfa_s", "TTFA (s)"), ("rtf", "RTF"), ("underrun_s", "playback underrun (s)"),
          ("gap_s", "inter-chunk gap (s)"))


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
        xs = [d["concurrency"] for d in levels]
        fig, axes = plt.subplots(2, 2, figsize=(10, 8))
        for ax, (metric, title) in zip(axes.flat, PANELS):
            drawn = False
            for stat in STATS:
                ys = [(d["summary"].get(metric) or {}).get(stat) for d in levels]
                pts = [(x, y) for x, y in zip(xs, ys) if y is not None]
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=stat)
                    drawn = True
            ax.set_xlabel("concurrency")
            ax.set_ylabel(title)
            ax.set_xticks(xs)
            ax.grid(True, alpha=0.3)
            if drawn:
                ax.legend()
            else:
                why = next((r[metric] for r in ((d["summary"].get("reasons") or {}) for d in levels) if r.get(metric)),
                           "no value at any level")
                ax.text(0.5, 0.5, textwrap.fill(f"n/a: {why}"[:240], 45), ha="center", va="center", fontsize=8,
                        transform=ax.transAxes)
        fig.suptitle(f"{case}: percentiles against concurrency")
        fig.tight_layout()
        path = out / f"{safe_name(case)}.png"  # a case name is user data: one component under out
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    return written
