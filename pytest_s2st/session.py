"""The pytest-s2st session: one object that owns the session's state and behaviour.

Like pytest-benchmark's BenchmarkSession: the plugin's hooks call its methods (``load_cases``,
``record_verdict``, ``finish``, ``display``); both plugin modules (plugin.py and plugin_service.py)
import this module and never each other.
"""
from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from .errors import S2STError
from .settings import SETTINGS

MEASUREMENT_KEY = pytest.StashKey["Any"]()  # item -> Measurement of s2st_benchmark
SERVICE_KEY = pytest.StashKey["Any"]()      # item -> level data of s2st_load
VERDICT_KEY = pytest.StashKey["Any"]()      # item -> the test's Verdict


def fail(exc: "S2STError | str") -> None:
    """Fail the test with one line: no traceback, no "During handling of the above exception"."""
    __tracebackhide__ = True
    raise pytest.fail.Exception(str(exc), pytrace=False) from None


class S2STSession:
    """Resolved cases and what was measured: for the tables, the verdicts and compare."""

    def __init__(self, config: pytest.Config):
        self.config = config
        # an explicit option is any value given on the command line: 0, "" and False included
        self.explicit: dict[str, Any] = {s.name: config.getoption(s.dest) for s in SETTINGS
                                         if config.getoption(s.dest) is not None}
        self.cases: list[Any] | None = None
        self.results: list[tuple[Any, Any]] = []          # (item, Measurement)
        self.service_results: list[tuple[str, dict]] = []  # (row name, level data)
        self.baselines: dict[str, Any] = {}                # quality.baseline config -> (case, Service)
        self.plots: list[str] = []
        self.inconclusive: list[tuple[str, list[str]]] = []
        self.regressions: list[str] = []
        self._evidence_root: Path | None = None

    # ------------------------------------------------------------------ settings and cases

    def ini(self, name: str) -> Any:
        return self.config.getini(name)

    def option(self, name: str) -> Any:
        """A session-wide setting by precedence: command line, ini, default."""
        if name in self.explicit:
            return self.explicit[name]
        from .cases import resolve_settings

        return resolve_settings({}, self.explicit, self.ini, lambda key: key)[name]

    def source(self, name: str) -> str:
        """Where a session-wide setting's value came from, for error lines: flag, ini key or default."""
        from .settings import BY_NAME

        setting = BY_NAME[name]
        if name in self.explicit:
            return setting.flag
        if self.ini(setting.ini) not in (None, "", []):
            return f"ini {setting.ini}"
        return f"{setting.flag} (default)"

    def check_evidence_dir(self) -> None:
        """An evidence dir that exists but is not a folder is a usage error before any test runs."""
        base = Path(self.option("evidence_dir"))
        if not base.is_absolute():
            base = self.config.rootpath / base
        if base.exists() and not base.is_dir():
            raise S2STError(f"{self.source('evidence_dir')}: {base} is not a directory")

    def config_paths(self) -> list[Any]:
        paths = self.config.getoption("s2st_config") or self.ini("s2st_config")
        if not paths:
            from .defaults import default_config_paths

            paths = default_config_paths()
        return list(paths)

    def load_cases(self) -> list[Any]:
        """Every configured case, resolved once (S2STError on a bad config or a duplicate case id)."""
        if self.cases is None:
            from .cases import load_case

            cases = [load_case(p, self.explicit, self.ini) for p in self.config_paths()]
            seen: dict[str, Any] = {}
            for case in cases:
                if case.case_id in seen:
                    raise S2STError(f"{case.config.path}: case id {case.case_id!r} is also used by "
                                    f"{seen[case.case_id].config.path}; set general.name to tell them apart")
                seen[case.case_id] = case
            self.cases = cases
        return self.cases

    def load_extra_case(self, path: str) -> Any:
        """A case outside the configured ones (a quality baseline), resolved the same way."""
        from .cases import load_case

        return load_case(path, self.explicit, self.ini)

    # ------------------------------------------------------------------ what tests record

    def add_measurement(self, item: pytest.Item, measurement: Any) -> None:
        item.stash[MEASUREMENT_KEY] = measurement  # kept even if a stage crashes half-way
        self.results.append((item, measurement))

    def add_service_level(self, item: pytest.Item, data: dict, baseline: dict | None = None) -> None:
        item.stash[SERVICE_KEY] = data
        if baseline is not None:
            self.service_results.append((f"{item.name} (baseline {baseline['case']})", baseline))
        self.service_results.append((item.name, data))

    def evidence_root(self) -> Path:
        """DIR/<timestamp>-<random>: one folder per session for every service run's evidence."""
        if self._evidence_root is None:
            base = Path(self.option("evidence_dir"))
            if not base.is_absolute():
                base = self.config.rootpath / base
            stamp = time.strftime("%Y%m%d-%H%M%S")
            try:
                base.mkdir(parents=True, exist_ok=True)
                self._evidence_root = Path(tempfile.mkdtemp(prefix=f"{stamp}-", dir=base))
            except OSError as exc:
                raise S2STError(f"{self.source('evidence_dir')}: {base}: cannot create a run folder there: "
                                f"{exc.strerror or exc}") from None
        return self._evidence_root

    def record_verdict(self, item: pytest.Item, report: pytest.TestReport, verdict: Any) -> None:
        """Put the verdict on the report, the JSON and the outcome: FAIL fails, INCONCLUSIVE is its own."""
        item.stash[VERDICT_KEY] = verdict
        report.s2st_verdict = verdict.status
        report.s2st_reasons = list(verdict.reasons)
        benchmark = getattr(item, "funcargs", {}).get("benchmark")
        for key in ("s2st", "s2st_service"):
            if benchmark is not None and key in benchmark.extra_info:
                benchmark.extra_info[key]["verdict"] = verdict.to_dict()
        if verdict.status == "FAIL":
            report.outcome = "failed"
            report.longrepr = "s2st FAIL:\n" + "\n".join(f"  {r}" for r in verdict.reasons)
        elif verdict.status == "INCONCLUSIVE":
            self.inconclusive.append((item.nodeid, verdict.reasons))
            if self.option("strict"):
                report.outcome = "failed"
                report.longrepr = ("s2st INCONCLUSIVE (failing under --s2st-strict):\n"
                                   + "\n".join(f"  {r}" for r in verdict.reasons))

    # ------------------------------------------------------------------ end of session

    def rows(self) -> list[Any]:
        from .report import rows_from

        rows = []
        for item, measurement in self.results:
            verdict = item.stash.get(VERDICT_KEY, None)
            rows += rows_from(item.name, item.nodeid, measurement.to_dict(), verdict.status if verdict else "")
        return rows

    def compared(self) -> dict[str, Any]:
        """{fullname[::stage]: saved metrics} of the run --benchmark-compare loaded."""
        from .benchmark_compat import compared_mapping
        from .report import compared_rows

        out: dict[str, Any] = {}
        for mapping in compared_mapping(self.config).values():
            for saved in mapping.values():
                out.update(compared_rows(saved))
        return out

    def check_regressions(self) -> list[str]:
        limits = self.option("compare_fail")
        if not limits or not self.results:
            return []
        from .report import regressions

        return regressions(self.rows(), self.compared(), limits)

    def finish(self, session: pytest.Session) -> None:
        """Plots, regressions and the exit status (pytest_sessionfinish)."""
        if self.service_results and self.option("plot"):
            from .plot import plot_service

            try:
                self.plots += [str(p) for p in plot_service(self.service_results, self.option("plot"))]
            except S2STError as exc:
                self.plots.append(f"not written: {exc}")
        self.regressions = self.check_regressions()
        failing = bool(self.regressions) or bool(self.inconclusive and self.option("strict"))
        if failing and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def display(self, tr: Any) -> None:
        """The s2st sections of the terminal summary."""
        if self.results:
            self._display_inference(tr)
        if self.service_results:
            self._display_service(tr)
        if self.inconclusive:
            tr.write_sep("=", "s2st INCONCLUSIVE", yellow=True)
            for nodeid, reasons in self.inconclusive:
                tr.write_line(f"{nodeid}:")
                for reason in reasons:
                    tr.write_line(f"    {reason}")
        if self.regressions:
            tr.write_sep("=", "s2st regressions (--s2st-compare-fail)", red=True)
            for line in self.regressions:
                tr.write_line(line)

    def _display_inference(self, tr: Any) -> None:
        from .report import insignificant, missing_notes, render_compare, render_table, unmatched

        rows = self.rows()
        tr.write_sep("-", "s2st: runtime per sample, peak memory, FLOPs")
        for line in render_table(rows):
            tr.write_line(line)
        for note in missing_notes(rows):
            tr.write_line(f"note: {note}")
        compared = self.compared()
        lines = render_compare(rows, compared) if compared else []
        if lines:
            tr.write_sep("-", "s2st: compared with the saved run (then -> now)")
            for line in lines:
                tr.write_line(line)
            tr.write_line("runtime: new/old ratio of means [95% bootstrap interval] and a word; "
                          "other columns: plain change")
            for note in insignificant(rows, compared, self.option("compare_fail") or ()):
                tr.write_line(f"note: {note}")
        if self.config.getoption("benchmark_compare", None):
            missing = unmatched(rows, compared)
            if missing:
                tr.write_line(f"s2st: {len(missing)} of {len(self.results)} benchmark(s) have no counterpart in "
                              f"the compared run (nothing to compare them with):")
                for name in missing:
                    tr.write_line(f"    {name}")

    def _display_service(self, tr: Any) -> None:
        from .report import render_service_table

        tr.write_sep("-", "s2st: service (TTFA, RTF, latency per concurrency level)")
        for line in render_service_table(self.service_results):
            tr.write_line(line)
        for name, data in self.service_results:
            gate = data.get("gate")
            if gate:
                speedup = ", ".join(f"{k} {v:.3f}x" for k, v in sorted((gate.get("speedup") or {}).items()))
                metric = data.get("policy", {}).get("speed_metric", "rtf")
                tr.write_line(f"gate {name}: {gate['status']} against {data.get('baseline_dir')}"
                              + (f"; speedup ({metric}): {speedup}" if speedup else ""))
        tr.write_line(f"evidence (requests.jsonl, wav/): {self._evidence_root}")
        for path in self.plots:
            tr.write_line(f"plot: {path}")


SESSION_KEY = pytest.StashKey[S2STSession]()


def session_of(config: pytest.Config) -> S2STSession:
    return config.stash[SESSION_KEY]
