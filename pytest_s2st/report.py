"""The extra table (memory and FLOPs beside pytest-benchmark's timings) and comparison with saved runs."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from .settings import CompareLimit

COLUMNS = (
    ("runtime_s", "runtime/sample"),
    ("peak_rss_mib", "peak RSS"),
    ("peak_delta_mib", "peak delta"),
    ("device_peak_mib", "device peak"),
    ("flops", "FLOPs"),
)


def fmt_seconds(value: float) -> str:
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us")):
        if value >= scale:
            return f"{value / scale:.3f} {unit}"
    return f"{value / 1e-9:.1f} ns"


def fmt_count(value: float) -> str:
    for scale, unit in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3f} {unit}"
    return f"{value:.0f}"


def fmt_metric(name: str, value: float | None) -> str:
    if value is None:
        return "n/a"
    if name == "runtime_s":
        return fmt_seconds(value)
    if name == "flops":
        return fmt_count(value)
    return f"{value:.1f} MiB"


def short_method(name: str, metric: Mapping[str, Any]) -> str:
    method = str(metric.get("method", "?"))
    return method.removeprefix("timer:").replace("torch.utils.flop_counter", "torch")


@dataclass
class Row:
    name: str          # test name, or "  <stage>" for a cascade's stage
    fullname: str      # pytest-benchmark's fullname (node id); stage rows add "::<stage>"
    metrics: Mapping[str, Mapping[str, Any]]  # metric -> Metric.to_dict()
    status: str = ""   # verdict of the test (PASS/FAIL/INCONCLUSIVE) or ""


def rows_from(name: str, fullname: str, s2st: Mapping[str, Any], status: str = "") -> list[Row]:
    rows = [Row(name, fullname, s2st.get("metrics", {}), status)]
    stages = s2st.get("stages", [])
    if len(stages) > 1:
        rows += [Row(f"  {st['name']}", f"{fullname}::{st['name']}", st.get("metrics", {})) for st in stages]
    return rows


def table(header: Sequence[str], body: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in [list(header)] + body) for i in range(len(header))]
    line = lambda cells: "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))
    return [line(header), "-" * len(line(header))] + [line(r) for r in body]


def render_table(rows: Sequence[Row]) -> list[str]:
    header = ["Name"] + [title for _, title in COLUMNS] + ["methods", "verdict"]
    body = []
    for row in rows:
        cells = [row.name]
        for key, _ in COLUMNS:
            cells.append(fmt_metric(key, (row.metrics.get(key) or {}).get("value")))
        methods = []
        for key in ("runtime_s", "peak_delta_mib", "flops"):
            if key in row.metrics:
                methods.append(short_method(key, row.metrics[key]))
        cells.append(", ".join(dict.fromkeys(methods)))
        cells.append(row.status)
        body.append(cells)
    return table(header, body)


def missing_notes(rows: Sequence[Row]) -> list[str]:
    """One line per n/a cell that says why (missing evidence is never a silent 0)."""
    notes = []
    for row in rows:
        for key, _ in COLUMNS:
            metric = row.metrics.get(key)
            if metric and metric.get("value") is None and metric.get("reason") and key != "device_peak_mib":
                notes.append(f"{row.name.strip()}: {key} n/a: {metric['reason']}")
    return list(dict.fromkeys(notes))


def compared_rows(saved: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """A saved pytest-benchmark JSON benchmark entry -> {fullname[::stage]: metrics}."""
    s2st = (saved.get("extra_info") or {}).get("s2st")
    if not s2st:
        return {}
    fullname = saved["fullname"]
    out = {fullname: s2st.get("metrics", {})}
    for stage in s2st.get("stages", []):
        out[f"{fullname}::{stage['name']}"] = stage.get("metrics", {})
    return out


def _value(metrics: Mapping[str, Any], key: str) -> float | None:
    return (metrics.get(key) or {}).get("value")


def pct_change(old: float | None, new: float | None) -> str:
    if old is None or new is None:
        return "n/a"
    if old == 0:
        return "=" if new == 0 else "was 0"
    return f"{100.0 * (new - old) / abs(old):+.1f}%"


def render_compare(rows: Sequence[Row], compared: Mapping[str, Mapping[str, Any]]) -> list[str]:
    header = ["Name"] + [title for _, title in COLUMNS]
    body = []
    for row in rows:
        old = compared.get(row.fullname)
        if old is None:
            continue
        cells = [row.name]
        for key, _ in COLUMNS:
            new_v, old_v = _value(row.metrics, key), _value(old, key)
            if new_v is None and old_v is None:
                cells.append("n/a")
            else:
                cells.append(f"{fmt_metric(key, old_v)} -> {fmt_metric(key, new_v)} ({pct_change(old_v, new_v)})")
        body.append(cells)
    return table(header, body) if body else []


def regressions(rows: Sequence[Row], compared: Mapping[str, Mapping[str, Any]], limits: Iterable[CompareLimit]) -> list[str]:
    out = []
    for row in rows:
        old = compared.get(row.fullname)
        if old is None:
            continue
        for limit in limits:
            change = limit.exceeded(_value(old, limit.metric), _value(row.metrics, limit.metric))
            if change is not None:
                unit = "%" if limit.percent else ""
                out.append(f"{row.fullname}: {limit.metric} regressed {change:+.2f}{unit} "
                           f"({fmt_metric(limit.metric, _value(old, limit.metric))} -> "
                           f"{fmt_metric(limit.metric, _value(row.metrics, limit.metric))}), limit {limit}")
    return out
