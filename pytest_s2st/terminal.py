"""The s2st sections of pytest's terminal summary: the inference, A/B, compare and service tables, then the
INCONCLUSIVE, regressed, unchecked and not-written lists. Every table goes through pytest_s2st_table first (a
plugin may change or add lines)."""
from __future__ import annotations

from typing import Any, Mapping

import psutil

from .hookcall import call_hook
from .inputs import show
from .judging import insignificant, unlike_rows, unmatched
from .report import compare_legend, missing_notes, render_compare, render_table, statistic_names, table_notes, wrap
from .report_service import render_service_table
from .session import S2STSession


def write_table(state: S2STSession, tr: Any, name: str, lines: list[str]) -> None:
    """A table's lines, after plugins had their say (pytest_s2st_table: they may change or add lines). A plugin
    that raised is one line at the end (display); the table is printed as it stands, and the session fails."""
    error = call_hook(state.config, "pytest_s2st_table", config=state.config, name=name, lines=lines)
    if error:
        state.hook_errors.append(f"{error} (table {name!r})")
        state.fail_session()
    for line in lines:
        tr.write_line(line)

def display(state: S2STSession, tr: Any) -> None:
    """The s2st sections of the terminal summary."""
    if state.worker:
        return
    if state.results or state.remote_results:
        _inference(state, tr)
    if state.service_results:
        _service(state, tr)
    for path in state.plots:  # after the service table, or alone when no service benchmark ran
        tr.write_line(f"plot: {path}")
    if state.inconclusive:
        tr.write_sep("=", "s2st INCONCLUSIVE", yellow=True)
        for nodeid, reasons in state.inconclusive:
            tr.write_line(f"{nodeid}:")
            for reason in reasons:
                tr.write_line(f"    {reason}")
    # each counted on pytest's last line ("1 passed, 1 regressed, 1 unchecked"), printed after this hook
    for lines, title, word in ((state.regressions, "s2st regressions (--s2st-compare-fail)", "regressed"),
                               (state.unchecked, "s2st limits not checked (--s2st-compare-fail)", "unchecked"),
                               (state.not_written, "s2st files not written", "not written"),
                               (state.hook_errors, "s2st hooks that raised", "raised in a hook")):
        if lines:
            tr.write_sep("=", title, red=True)
            for line in lines:
                tr.write_line(line)
            tr.stats.setdefault(word, []).extend(lines)

def _inference(state: S2STSession, tr: Any) -> None:
    rows = state.rows()
    tr.write_sep("-", "s2st: runtime per sample, peak memory, FLOPs")
    write_table(state, tr, "inference", render_table(rows) + wrap(table_notes(rows) + [f"note: {note}" for note
                                                                                      in missing_notes(rows)]))
    warning = contention_warning(state)
    if warning:
        tr.write_line(f"warning: {warning}", yellow=True)
    _ab(state, tr)
    try:
        _compare(state, tr, rows)
    except Exception as exc:  # noqa: BLE001 -- what was measured is shown above whatever the saved run holds
        tr.write_line(f"s2st: the compare with the saved run failed ({type(exc).__name__}: {show(exc)})", red=True)

def _ab(state: S2STSession, tr: Any) -> None:
    from .ab import terminal_tables  # lazy: heavy

    # one table per A/B mode, each with its own title and legend
    for title, lines in terminal_tables([(r.name, r.measurement) for r in state.records() if "ab" in r.measurement]):
        tr.write_sep("-", f"s2st: {title}")
        write_table(state, tr, "ab", lines)

def _compare(state: S2STSession, tr: Any, rows: list[Any]) -> None:
    compared = state.compared()
    lines = render_compare(rows, compared) if compared else []
    if lines:
        tr.write_sep("-", "s2st: compared with the saved run (then -> now)")
        notes = [f"note: {note}" for note in insignificant(rows, compared, state.option("compare_fail") or ())]
        write_table(state, tr, "compare", lines + wrap([compare_legend(statistic_names(rows, "s"))] + notes
                                                      + unlike_rows(rows, compared)))
    if state.config.getoption("benchmark_compare", None):
        missing = unmatched(rows, compared)
        if missing:
            tr.write_line(f"s2st: {len(missing)} of {len(state.records())} benchmark(s) have no counterpart in "
                          f"the compared run (nothing to compare them with):")
            faults = getattr(state, "compare_faults", {})
            for name in missing:
                tr.write_line(f"    {name}" + (f" ({faults[name]})" if name in faults else ""))

def contention_warning(state: S2STSession) -> str | None:
    """More xdist workers than physical cores while timing on the cpu: runtimes measure contention."""
    cores = psutil.cpu_count(logical=False) or psutil.cpu_count() or 1
    on_cpu = sum(1 for r in state.records() if (r.measurement.get("device") or {}).get("name") == "cpu")
    if state.workers <= cores or not on_cpu or state.option("processes"):  # --s2st-processes: they take turns
        return None
    return (f"{state.workers} xdist workers on {cores} physical core(s) timed {on_cpu} cpu benchmark(s): "
            f"their runtime/sample measures contention; time with -n {cores} or fewer (or -n 0)")

def _service(state: S2STSession, tr: Any) -> None:
    tr.write_sep("-", "s2st: service (TTFA, RTF, latency per concurrency level)")
    lines = render_service_table(state.service_results)
    for name, data in state.service_results:
        gate = data.get("gate")
        if gate:
            speedup = ", ".join(f"{k} {v:.3f}x" for k, v in sorted((gate.get("speedup") or {}).items()))
            metric = data.get("policy", {}).get("speed_metric", "rtf")
            lines.append(gate_line(name, gate, data.get("baseline_dir"), metric, speedup))
    if state.benchmark_rows_left_out:
        lines += wrap([f"pytest-benchmark's table leaves these {state.benchmark_rows_left_out} level(s) out: "
                       "each is one round of its whole wall time there; its saved JSON keeps them"])
    lines.append(f"evidence (requests.jsonl, wav/): {state.evidence_root()}")
    write_table(state, tr, "service", lines)


def gate_line(name: str, gate: Mapping[str, Any], baseline_dir: str | None, metric: str, speedup: str) -> str:
    """The service table's line per gated level: against which baseline run, or, without one, the reason (never
    'against None')."""
    if baseline_dir:
        line = f"gate {name}: {gate['status']} against {baseline_dir}"
    else:
        reasons = gate.get("reasons") or []
        line = f"gate {name}: {gate['status']}: {reasons[0] if reasons else 'no baseline run to compare with'}"
    return line + (f"; speedup ({metric}): {speedup}" if speedup else "")
