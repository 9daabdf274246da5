"""The service table (s2st_load): latency, then playback and load, one row per concurrency level, with its notes.
Every metric column comes from the metric table (metrics.py)."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from .inputs import finite
from .metrics import BY_NAME, SERVICE_METRICS, column_format
from .report import fit, wrap


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
