"""pytest glue of the results history: --s2st-history appends the session's rows, --s2st-history-fail judges
each new value against its series' window (history/changes.py). The controller does it once: never an xdist
worker, never a code-version A/B worker (their rows come back to the controller)."""
from __future__ import annotations

import re
import subprocess
from typing import TYPE_CHECKING, Any

import pytest

from .benchmark_compat import session_document
from .errors import S2STError
from .metrics import BY_NAME
from .plugin_benchmark import HISTORY_PRECISION

if TYPE_CHECKING:
    from .protocols import SessionOptions


def configure(config: pytest.Config, state: SessionOptions) -> None:
    try:
        url = state.option("history")
        limits = state.option("history_fail")
        window = state.option("history_window")
    except S2STError as exc:
        raise pytest.UsageError(str(exc)) from None
    if limits and not url:
        raise pytest.UsageError(f"{state.source('history_fail')}: judges new values against the history; name the "
                                "history with --s2st-history URL (or ini s2st_history)")
    if not url or hasattr(config, "workerinput") or config.pluginmanager.has_plugin("s2st-ab-worker"):
        return
    config.pluginmanager.register(HistoryRecorder(url, limits or (), window, state.source("history")),
                                  "s2st-history")


class HistoryRecorder:
    def __init__(self, url: str, limits: tuple, window: int, source: str) -> None:
        self.url, self.limits, self.window, self.source = url, limits, window, source
        self.lines: list[str] = []
        self.alerts: list[str] = []

    @pytest.hookimpl(trylast=True)  # after the verdicts and the A/B are in each row (session.finish)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        from .history.records import from_document  # lazy: plugin load
        from .history.store import open_store  # lazy: plugin load

        document = session_document(session.config)
        if document is None:
            self.lines.append(f"nothing kept: no benchmark ran ({self.source} {self.url})")
            return
        _add_subject(document, session.config.rootpath)
        try:
            doc = from_document(document, "this session", source="session")
            self.lines += _short_of_precision(doc)
            with open_store(self.url) as store:
                run_id = store.append(doc)
                self.lines.append(f"{len(doc.points)} value(s) of {len({p.benchmark for p in doc.points})} "
                                  f"benchmark(s) kept in {store.where} (run {run_id})")
                self.alerts = _judge(store, doc, run_id, self.limits, self.window)
        except S2STError as exc:  # what was measured is printed; the history is what failed, and fails the session
            self.alerts.append(f"not kept: {exc}")  # (as an --s2st-summary not written does)
        if self.alerts and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    @pytest.hookimpl(wrapper=True)  # after pytest-benchmark's and the s2st tables
    def pytest_terminal_summary(self, terminalreporter: Any) -> Any:
        try:
            return (yield)
        finally:
            self._display(terminalreporter)

    def _display(self, terminalreporter: Any) -> None:
        terminalreporter.write_sep("-", "s2st history")
        for line in self.lines:
            terminalreporter.write_line(line)
        if self.alerts:
            terminalreporter.write_sep("=", "s2st history: failed (--s2st-history, --s2st-history-fail)", red=True)
            for line in self.alerts:
                terminalreporter.write_line(line)


def _short_of_precision(doc: Any) -> list[str]:
    """One line per kept runtime that stopped short of the history's precision target (its interval as measured)."""
    out = []
    for point in doc.points:
        if (point.metric, point.part, point.statistic) != ("runtime_s", "total", "mean") or None in (
                point.value, point.low, point.high) or not point.value:
            continue
        precision = (point.high - point.low) / 2 / point.value
        if precision > HISTORY_PRECISION * 1.0001:
            out.append(f"{point.benchmark}: runtime kept at +-{100 * precision:.1f} % after {point.n} rounds, short "
                       f"of the +-{100 * HISTORY_PRECISION:.0f} % a history asks (--s2st-target-precision, "
                       "--s2st-max-time)")
    return out


def _add_subject(document: dict, root: Any) -> None:
    """The commit's subject line for the trend page's hover: pytest-benchmark's commit_info has none. Bounded: one
    line of at most 200 characters, 5 s; a tree that is not a git repository keeps none."""
    info = document.get("commit_info")
    if not isinstance(info, dict) or not re.fullmatch(r"[0-9a-f]{4,64}", str(info.get("id"))) or info.get("subject"):
        return
    try:
        done = subprocess.run(["git", "log", "-1", "--format=%s", info["id"], "--"], cwd=root, capture_output=True,
                              timeout=5, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return
    lines = done.stdout[:200].decode("utf-8", "replace").strip().splitlines()
    if done.returncode == 0 and lines:
        info["subject"] = lines[0]


def _judge(store: Any, doc: Any, run_id: int | None, limits: tuple, window: int) -> list[str]:
    """Each new value of a limited metric against the values before it in its series (same branch, machine)."""
    from .history.changes import window_alert  # lazy: plugin load
    from .history.judge import higher_is_better, standard_error  # lazy: plugin load
    from .history.series import SeriesKey  # lazy: plugin load

    alerts = []
    by_metric = {metric: (test, boundary) for metric, test, boundary in limits}
    for point in doc.points:
        if point.metric not in by_metric or point.value is None:
            continue
        test, boundary = by_metric[point.metric]
        key = SeriesKey(point.benchmark, point.part, point.metric, point.statistic)
        past = [e.point.value for e in store.series(key, doc.run.branch, doc.run.machine)
                if e.run_id != run_id and e.point.value is not None]
        alert = window_alert(past, point.value, len(past), test, boundary, window, higher_is_better(point.metric),
                             standard_error(point))
        if alert is not None:
            fmt = BY_NAME[point.metric].format
            alerts.append(f"{key.label()}: {fmt(point.value)} is past the {test} threshold {fmt(alert.limit)} "
                          f"(mean of the last {alert.window} runs: {fmt(alert.baseline)})")
    return alerts
