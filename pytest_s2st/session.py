"""The pytest-s2st session: one object that owns the session's state and behaviour.

Like pytest-benchmark's BenchmarkSession: the plugin's hooks call its methods (``load_cases``,
``record_verdict``, ``finish``; terminal.py prints its tables); the plugin modules (plugin.py, plugin_service.py, ...)
import this module and never each other.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .errors import S2STError
from .inputs import show
from .results import Record, SessionVerdicts
from .settings import BY_NAME, SETTINGS
from .settings import path as check_path

if TYPE_CHECKING:
    from .protocols import CodeVersions

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
        self.fill_time = False                   # --benchmark-max-time: add rounds until it (adopt_benchmark_options)
        self.benchmark_refusals: list[str] = []  # pytest-benchmark options an s2st benchmark cannot honour
        self.cases: list[Any] | None = None
        self._external_case: Any = None                   # --s2st-endpoint without a config (external_case)
        self.results: list[tuple[Any, Any]] = []          # (item, Measurement)
        self.service_results: list[tuple[str, dict]] = []  # (row name, level data)
        self.baselines: dict[str, Any] = {}                # quality.baseline config -> (case, Service)
        self.translation_baselines: dict[str, dict] = {}   # quality.baseline config -> its bleu/chrf metrics
        self.plots: list[str] = []
        self.benchmark_rows_left_out = 0  # service levels left out of pytest-benchmark's table (plugin.py)
        self.case_start_rss: dict[str, float] = {}  # case id -> this process's RSS (MiB) before its model was built
        self.inconclusive: list[tuple[str, list[str]]] = []
        # --s2st-ab-base: its controller, or this worker's part (plugin_versions)
        self.code_versions: CodeVersions | None = None
        self.regressions: list[str] = []  # --s2st-compare-fail limits crossed ("regressed")
        self.unchecked: list[str] = []  # limits that could not be checked: they fail too, but are no regression
        self.not_written: list[str] = []  # --s2st-summary files that could not be written
        self.hook_errors: list[str] = []  # a public hook that raised (hookcall.py): one line each; the session fails
        self.pytest_session: pytest.Session | None = None  # set at finish: a table's hook may fail it after
        self._evidence_root: Path | None = None
        # xdist (plugin_xdist.py): the worker id on a worker; on the controller, what the workers sent
        workerinput = getattr(config, "workerinput", None)
        self.worker: str | None = workerinput.get("workerid") if workerinput else None
        self._planned_root: str | None = workerinput.get("s2st_evidence_root") if workerinput else None
        self.remote_results: list[Record] = []  # the workers' rows
        self.original_nodeid: dict[str, str] = {}  # nodeid with xdist's "@group" suffix -> the plain one
        self.workers = 0                          # xdist workers the controller started

    # ------------------------------------------------------------------ settings and cases

    def ini(self, name: str) -> Any:
        return self.config.getini(name)

    def option(self, name: str) -> Any:
        """A session-wide setting by precedence: command line, ini, default."""
        if name in self.explicit:
            return self.explicit[name]
        from .cases import resolve_settings  # lazy: heavy

        return resolve_settings({}, self.explicit, self.ini, lambda key: key)[name]

    def adopt_benchmark_options(self) -> None:
        """pytest-benchmark's round options become the s2st settings they mean (command-line values, like
        the --s2st- flags); one that disagrees with its explicit --s2st- twin is a usage error."""
        from .benchmark_compat import benchmark_twins  # lazy: plugin load

        twins, self.benchmark_refusals = benchmark_twins(self.config)
        self.fill_time = bool(twins.pop("fill_time", False))
        flags = {"min_rounds": "--benchmark-min-rounds", "max_time": "--benchmark-max-time",
                 "warmup": "--benchmark-warmup-iterations"}
        for name, value in twins.items():
            if name == "min_rounds" and value < 1:
                raise S2STError(f"{flags[name]}: must be an integer > 0 for s2st benchmarks, got {value}")
            if name == "warmup" and value < 0:  # pytest-benchmark takes -5 silently (as 0 warm-ups)
                raise S2STError(f"{flags[name]}: must be an integer >= 0, got {value}")
            if name in self.explicit and self.explicit[name] != value:
                raise S2STError(f"{flags[name]} {value} and {BY_NAME[name].flag} {self.explicit[name]} disagree: "
                                "give one of them")
            if name == "max_time":  # pytest-benchmark takes -1 silently; an s2st benchmark would add no round
                try:
                    value = BY_NAME[name].parse(value)
                except ValueError as exc:
                    raise S2STError(f"{flags[name]}: {exc}") from None
            self.explicit[name] = value

    def source(self, name: str) -> str:
        """Where a session-wide setting's value came from, for error lines: flag, ini key or default."""
        setting = BY_NAME[name]
        if name in self.explicit:
            return setting.flag
        if self.ini(setting.ini) not in (None, "", []):
            return f"ini {setting.ini}"
        return f"{setting.flag} (default)"

    def pin_device(self, asked: str) -> str:
        """On xdist worker gwK, 'cuda'/'npu' become '<kind>:<K mod count>' (distribute.worker_device)."""
        from .distribute import accelerator_count, worker_device, worker_index  # lazy: plugin load

        return worker_device(asked, worker_index(self.worker), accelerator_count)

    def check_evidence_dir(self) -> None:
        """An evidence or plot dir that exists but is not a folder is a usage error before any test runs."""
        for name in ("evidence_dir", "plot"):
            if self.option(name) is None:
                continue
            base = Path(self.option(name))
            if not base.is_absolute():
                base = self.config.rootpath / base
            if base.exists() and not base.is_dir():
                raise S2STError(f"{self.source(name)}: {base} is not a directory")

    def config_paths(self) -> list[Any]:
        flag = self.config.getoption("s2st_config")
        paths = flag or self.ini("s2st_config")
        if not paths:
            from .defaults import default_config_paths  # lazy: plugin load

            paths = default_config_paths()
        for p in paths:
            try:
                check_path(os.fspath(p))
            except ValueError as exc:  # a NUL or a line break: one line naming where it came from
                raise S2STError(f"{'--s2st-config' if flag else 's2st_config (ini)'}: {exc}") from None
        return list(paths)

    def load_cases(self) -> list[Any]:
        """Every configured case, resolved once (S2STError on a bad config or a duplicate case id)."""
        if self.cases is None:
            from .cases import load_case  # lazy: heavy

            cases = [load_case(p, self.explicit, self.ini) for p in self.config_paths()]
            seen: dict[str, Any] = {}
            for case in cases:
                if case.case_id in seen:
                    raise S2STError(f"{case.config.path}: case id {case.case_id!r} is also used by "
                                    f"{seen[case.case_id].config.path}; set general.name to tell them apart")
                seen[case.case_id] = case
            self.cases = cases
        return self.cases

    def external_case(self) -> Any:
        """--s2st-endpoint with no --s2st-config (flag or ini): the service benchmarks' ONE case, the external
        server, named from it (service/bench.external_case_name; asked once per session); else None."""
        if not self.option("endpoint") or self.config.getoption("s2st_config") or self.ini("s2st_config"):
            return None
        if self._external_case is None:
            from .cases import external_case  # lazy: heavy
            from .service.bench import external_case_name  # lazy: plugin load

            case_id, _ = external_case_name(self.option("endpoint"))
            self._external_case = external_case(case_id, self.explicit, self.ini)
        return self._external_case

    def load_extra_case(self, path: str) -> Any:
        """A case outside the configured ones (a quality baseline), resolved the same way."""
        from .cases import load_case  # lazy: heavy

        return load_case(path, self.explicit, self.ini)

    # ------------------------------------------------------------------ what tests record

    def add_measurement(self, item: pytest.Item, measurement: Any) -> None:
        item.stash[MEASUREMENT_KEY] = measurement  # kept even if a stage crashes half-way
        self.results.append((item, measurement))

    def add_service_level(self, item: pytest.Item, data: dict, baseline: dict | None = None,
                          name: str | None = None) -> None:
        """One row of the service table (``name``: a merged level's, without its part suffix)."""
        item.stash[SERVICE_KEY] = data
        if baseline is not None:
            self.service_results.append((f"{item.name} (baseline {baseline['case']})", baseline))
        self.service_results.append((name or item.name, data))

    @contextlib.contextmanager
    def timing_turn(self):
        """Under --s2st-processes, the workers take turns: an exclusive lock on the file the controller named
        (workerinput s2st_turn), so one benchmark is measured at a time and no worker's timing shares the CPUs
        with another's."""
        workerinput = getattr(self.config, "workerinput", None) or {}
        path = workerinput.get("s2st_turn")
        if not path:
            yield
            return

        with open(path, "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def plan_evidence_root(self) -> str:
        """The xdist controller names the session's evidence root once and hands it to every worker
        (pytest_configure_node); the first worker that runs a service level creates it."""
        if self._planned_root is None:
            base = Path(self.option("evidence_dir"))
            if not base.is_absolute():
                base = self.config.rootpath / base
            self._planned_root = str(base / f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(4)}")
        return self._planned_root

    def plot_dir(self) -> Path:
        """--s2st-plot DIR: a relative DIR is under the rootdir, as the evidence folder is (not the working
        directory pytest happened to start in)."""
        base = Path(self.option("plot"))
        return base if base.is_absolute() else self.config.rootpath / base

    def evidence_root(self) -> Path:
        """DIR/<timestamp>-<random>: one folder per session for every service run's evidence
        (under xdist: the one the controller planned, shared by every worker)."""
        if self._evidence_root is None:
            base = Path(self.option("evidence_dir"))
            if not base.is_absolute():
                base = self.config.rootpath / base
            stamp = time.strftime("%Y%m%d-%H%M%S")
            try:
                base.mkdir(parents=True, exist_ok=True)
                if self._planned_root is not None:
                    Path(self._planned_root).mkdir(parents=True, exist_ok=True)
                    self._evidence_root = Path(self._planned_root)
                else:
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
        # the evidence travels with the report (-rA, --report-log) and into junitxml (a property), PASS included
        evidence = "\n".join([verdict.status] + [f"  {r}" for r in verdict.reasons])
        report.sections.append(("s2st verdict", evidence))
        item.user_properties.append(("s2st_verdict", evidence))
        benchmark = getattr(item, "funcargs", {}).get("benchmark")
        for key in ("s2st", "s2st_service"):
            if benchmark is not None and key in benchmark.extra_info:
                benchmark.extra_info[key]["verdict"] = verdict.to_dict()
        if verdict.status == "FAIL":
            report.outcome = "failed"
            # the first reason first: pytest's short summary shows the first line alone, cut to the terminal's
            # width ("FAILED nodeid - runtime_s x1.206 [1.182, 1.218] slower" fits 80 columns; a prefix did not)
            report.longrepr = "\n  ".join(verdict.reasons or ["(no reason given)"]) + "\n  (the s2st verdict: FAIL)"
        elif verdict.status == "INCONCLUSIVE":
            self.inconclusive.append((item.nodeid, verdict.reasons))
            if self.option("strict"):
                report.outcome = "failed"
                report.longrepr = ("s2st INCONCLUSIVE (failing under --s2st-strict):\n"
                                   + "\n".join(f"  {r}" for r in verdict.reasons))

    # ------------------------------------------------------------------ end of session

    def records(self) -> list[Record]:
        """A Record of every s2st_benchmark call: this process's and, on an xdist controller, every worker's
        (sorted by nodeid: workers finish in any order)."""
        local = []
        for item, measurement in self.results:
            verdict = item.stash.get(VERDICT_KEY, None)
            nodeid = self.original_nodeid.get(item.nodeid, item.nodeid)
            local.append(Record(item.name, nodeid, measurement.to_dict(), verdict.status if verdict else ""))
        return local + sorted(self.remote_results, key=lambda r: r.nodeid)

    def rows(self) -> list[Any]:
        from .rows import rows_from  # lazy: plugin load

        rows = []
        for r in self.records():
            rows += rows_from(r.name, r.nodeid, r.measurement, r.verdict)
        return rows

    def export(self) -> dict[str, Any]:
        """What a worker sends the controller (JSON-able): its measurements, service levels, INCONCLUSIVEs."""
        plain = lambda nodeid: self.original_nodeid.get(nodeid, nodeid)  # noqa: E731
        return {
            "worker": self.worker,
            "results": [[r.name, r.nodeid, r.measurement, r.verdict] for r in self.records()],
            "service": [[name, data] for name, data in self.service_results],
            "inconclusive": [[plain(nodeid), reasons] for nodeid, reasons in self.inconclusive],
            "evidence_root": str(self._evidence_root) if self._evidence_root else None,
        }

    def absorb(self, payload: dict[str, Any]) -> None:
        """The controller's side of export(): one worker's rows join the session's."""
        self.remote_results += [Record(str(n), str(i), dict(m), str(v)) for n, i, m, v in payload.get("results", [])]
        self.service_results += [(str(n), dict(d)) for n, d in payload.get("service", [])]
        self.inconclusive += [(str(i), [str(r) for r in reasons]) for i, reasons in payload.get("inconclusive", [])]
        if payload.get("evidence_root"):
            self._evidence_root = Path(payload["evidence_root"])

    def compared(self) -> dict[str, Any]:
        """{fullname[::stage]: saved metrics} of the run --benchmark-compare loaded."""
        from .benchmark_compat import compared_mapping  # lazy: plugin load
        from .distribute import malformed_s2st  # lazy: plugin load
        from .rows import compared_rows  # lazy: plugin load

        out: dict[str, Any] = {}
        self.compare_faults: dict[str, str] = {}  # {fullname: the saved entry's fault, naming file and key}
        for path, mapping in compared_mapping(self.config).items():
            for fullname, saved in mapping.items():
                why = malformed_s2st(saved)
                if why:
                    self.compare_faults[str(fullname)] = f"{path}: {why}"
                out.update(compared_rows(saved))
        return out

    def check_regressions(self) -> tuple[list[str], list[str]]:
        """(limits crossed, limits not checked) of --s2st-compare-fail against the saved run."""
        limits = self.option("compare_fail")
        if not limits or not (self.results or self.remote_results):
            return [], []
        from .judging import judge_limits  # lazy: plugin load

        if self.config.getoption("benchmark_compare", None):
            compared = self.compared()
            # a limit on a metric this run could not measure is that test's INCONCLUSIVE (judge.unmeasured_gate)
            return judge_limits(self.rows(), compared, limits, self.compare_faults, unmeasured_here=False)
        # no saved run: the limits judge in-process A/Bs (each test's own verdict); any other benchmark checked nothing
        return [], [f"{r.nodeid}: no baseline (s2st_benchmark(..., baseline=)) and no --benchmark-compare, so no "
                    f"limit of --s2st-compare-fail {','.join(map(str, limits))} was checked"
                    for r in self.records() if "ab" not in r.measurement]

    def finish(self, session: pytest.Session) -> None:
        """Plots, regressions and the exit status (pytest_sessionfinish)."""
        if self.worker:  # the controller does all of it once, over every worker's rows
            return
        if self.service_results and self.option("plot"):
            from .plot import plot_service  # lazy: plugin load

            try:
                self.plots += [str(p) for p in plot_service(self.service_results, self.plot_dir())]
            except S2STError as exc:
                self.plots.append(f"not written: {exc}")
            except OSError as exc:  # what was measured is printed whatever became of the picture
                self.plots.append(f"not written: {self.plot_dir()}: {exc.strerror or exc}")
        elif self.option("plot"):
            self.plots.append("nothing written: --s2st-plot draws service benchmarks (s2st_load), and none ran")
        try:
            self.regressions, self.unchecked = self.check_regressions()
        except Exception as exc:  # noqa: BLE001 -- a compare that crashed checked nothing: it fails, tables stay
            self.unchecked = [f"--s2st-compare-fail: the compare crashed ({type(exc).__name__}: {show(exc)}), "
                              "so no limit was checked"]
        self._write_summary()
        # an export that could not write its file says so in verdicts.not_written: it fails the session as ours do
        verdicts = SessionVerdicts(list(self.inconclusive), list(self.regressions), list(self.unchecked),
                                   self.not_written)
        from .hookcall import call_hook  # lazy: plugin load

        self.pytest_session = session
        error = call_hook(self.config, "pytest_s2st_session_ready", config=self.config, rows=self.records(),
                          verdicts=verdicts)
        if error:
            self.hook_errors.append(error)
        # a limit not checked fails as a crossed one does (a gate that could not look passes nothing)
        failing = bool(self.regressions or self.unchecked or self.not_written or self.hook_errors) or bool(
            self.inconclusive and self.option("strict"))
        if failing:
            self.fail_session()

    def fail_session(self) -> None:
        """A session that passed its tests fails (exit 1); one that failed already keeps its status."""
        session = self.pytest_session
        if session is not None and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def _write_summary(self) -> None:
        """The A/B tables as markdown: into --s2st-summary FILE, and appended to $GITHUB_STEP_SUMMARY (GitHub
        Actions shows it on the job's page) when that is set."""
        from .ab import markdown_ab  # lazy: heavy

        records = [r for r in self.records() if "ab" in r.measurement]
        lines = markdown_ab([(r.name, r.measurement, r.verdict) for r in records])
        if not lines:
            return
        text = "\n".join(lines) + "\n"
        targets = [(self.option("summary"), "w"), (os.environ.get("GITHUB_STEP_SUMMARY"), "a")]
        for path, mode in targets:
            if not path:
                continue
            if path.endswith(".json"):  # the same rows for a program: each benchmark's measurement and verdict
                body = json.dumps([{"name": r.name, "nodeid": r.nodeid, "verdict": r.verdict, "s2st": r.measurement}
                                   for r in records], indent=1, default=str) + "\n"
            else:
                body = text
            try:
                Path(path).parent.mkdir(parents=True, exist_ok=True)
                with open(path, mode, encoding="utf-8") as handle:
                    handle.write(body)
            except OSError as exc:
                self.not_written.append(f"--s2st-summary: {path} not written ({exc.strerror or exc})")

SESSION_KEY = pytest.StashKey[S2STSession]()


def session_of(config: pytest.Config) -> S2STSession:
    return config.stash[SESSION_KEY]
