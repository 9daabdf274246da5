"""PNG of TTFA and RTF percentiles against concurrency, one figure per case (--s2st-plot DIR)."""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable

from .errors import S2STError

STATS = ("p50", "p90", "p99")


def plot_service(results: Iterable[tuple[Any, dict]], out_dir: str | Path) -> list[Path]:
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only, no display
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise S2STError(f"--s2st-plot needs matplotlib (pip install 'pytest-s2st[plot]'): {exc}") from None
    by_case: dict[str, list[dict]] = defaultdict(list)
    for _, data in results:
        by_case[data["case"]].append(data)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for case, levels in sorted(by_case.items()):
        levels.sort(key=lambda d: d["concurrency"])
        xs = [d["concurrency"] for d in levels]
        fig, axes = plt.subplots(1, 2, figsize=(10, 4))
        for ax, metric, title in ((axes[0], "ttfa_s", "TTFA (s)"), (axes[1], "rtf", "RTF")):
            for stat in STATS:
                ys = [(d["summary"].get(metric) or {}).get(stat) for d in levels]
                pts = [(x, y) for x, y in zip(xs, ys) if y is not None]
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=stat)
            ax.set_xlabel("concurrency")
            ax.set_ylabel(title)
            ax.set_xticks(xs)
            ax.grid(True, alpha=0.3)
            ax.legend()
        fig.suptitle(f"{case}: TTFA and RTF percentiles against concurrency")
        fig.tight_layout()
        path = out / f"{case}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    return written
