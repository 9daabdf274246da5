"""The A/B table every mode shows unless it renders its own (ABMode.render, ABMode.markdown): per benchmark both
runtimes, the paired ratio with its interval and word, and every other measured metric's change."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..inputs import finite
from ..metrics import format_value as fmt_metric
from ..judging import ab_change
from ..report import COLUMNS, WIDTH, one_line_or_stacked, pct_change, table

# no RSS rise (nor peak RSS): both sides rise over one start, so the side measured second inherits the first's
UNCOMPARED = ("rss_rise_mib", "peak_rss_mib")


def sides(s2st: Mapping[str, Any]) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    """(the baseline's metrics, the candidate's) of an A/B measurement dict; {} for a part of the wrong shape."""
    mapping = lambda value: value if isinstance(value, Mapping) else {}  # noqa: E731
    return mapping(mapping(s2st.get("baseline")).get("metrics")), mapping(s2st.get("metrics"))


def value(metrics: Mapping[str, Any], key: str) -> float | None:
    """A metric's value when it is usable evidence (inputs.finite)."""
    entry = metrics.get(key)
    return finite(entry.get("value")) if isinstance(entry, Mapping) else None


def other_columns(measurements: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """(metric, title) of the columns after the runtime that some candidate has a value for."""
    return [(key, title) for key, title in COLUMNS[1:] if key not in UNCOMPARED
            and any(value(sides(s2st)[1], key) is not None for s2st in measurements)]


def ratio_text(change: Any) -> str:
    """'x1.234 [1.100, 1.300]', 'x1.234' without an interval, 'n/a' without a ratio."""
    if change.ratio is None:
        return "n/a"
    return f"x{change.ratio:.3f}" + (f" [{change.low:.3f}, {change.high:.3f}]" if change.low is not None else "")


def render_ab(records: Sequence[tuple[str, Mapping[str, Any]]], width: int = WIDTH) -> list[str]:
    """One row per A/B benchmark: both runtimes, the paired ratio with its interval and word, then each other
    measured metric's candidate value and its change from the baseline. Wider than ``width``: three rows per
    benchmark (baseline, candidate, change: the ratio with its interval and word, the other metrics' changes)."""
    rows = [(name, s2st, ab_change(s2st)) for name, s2st in records]
    rows = [(name, s2st, change) for name, s2st, change in rows if change is not None]
    if not rows:
        return []
    others = other_columns([s2st for _, s2st, _ in rows])
    header = ["Name", "baseline", "candidate", "ratio [95% CI]", "verdict"] + [title for _, title in others]
    body, stacked = [], []
    for name, s2st, change in rows:
        old, new = sides(s2st)
        ratio = ratio_text(change)
        before, after = (fmt_metric("runtime_s", value(old, "runtime_s")),
                         fmt_metric("runtime_s", value(new, "runtime_s")))
        values = [(fmt_metric(key, value(old, key)), fmt_metric(key, value(new, key)),
                   pct_change(value(old, key), value(new, key), key)) for key, _ in others]
        body.append([name, before, after, ratio, change.word] + [f"{b} ({c})" for _, b, c in values])
        stacked += [[name, "baseline", before] + [a for a, _, _ in values],
                    ["", "candidate", after] + [b for _, b, _ in values],
                    ["", "change", f"{ratio} {change.word}".strip()] + [c for _, _, c in values]]
    return one_line_or_stacked(table(header, body), ["Name", "", "runtime"] + [title for _, title in others],
                               stacked, width)


def markdown_ab(rows: Sequence[tuple[str, Mapping[str, Any], str]]) -> list[str]:
    """The A/B rows as a GitHub-flavoured markdown table: each benchmark's runtimes, the paired ratio with its
    interval and word, the test's verdict, and every other measured metric's change; ``rows``: (name, measurement
    dict, verdict), each with a paired change (ab_change)."""
    cell = lambda text: str(text).replace("|", "\\|").replace("\n", " ")  # noqa: E731
    others = other_columns([s2st for _, s2st, _ in rows])
    out = ["| benchmark | baseline | candidate | ratio [95% CI] | verdict | test | "
           + " | ".join(t for _, t in others) + (" |" if others else ""),
           "|" + "---|" * (6 + len(others))]
    for name, s2st, status in rows:
        change = ab_change(s2st)
        old, new = sides(s2st)
        verdict = f"**{status}**" if status == "FAIL" else status
        cells = [name, fmt_metric("runtime_s", value(old, "runtime_s")),
                 fmt_metric("runtime_s", value(new, "runtime_s")),
                 ratio_text(change), change.word, verdict] + [pct_change(value(old, k), value(new, k), k)
                                                              for k, _ in others]
        out.append("| " + " | ".join(cell(c) for c in cells) + " |")
    return out
