"""pytest glue of the code-version A/B (``--s2st-ab-base REF``; the core is versions/).

The controller (the user's pytest run, in the head's tree) checks REF out beside it, starts the worker pairs
over the s2st benchmarks it collected, and turns what both sides measured into each test's row and verdict: its
own tests run no model. A worker (a pytest session the controller started, in either tree) runs those
benchmarks as usual, except that each one's timed rounds are the ones the controller orders.
"""
from __future__ import annotations

import functools
import inspect
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pytest

from .errors import S2STError
from .session import fail
from .versions.channel import worker_spec

if TYPE_CHECKING:
    from .measurement import Measurement
    from .protocols import Node, SessionState
    from .rounds import TimedRounds

# paired round ratios per benchmark at most: rounds per worker pair and side are this over the pairs (one pair: 160,
# two: 80), unless --s2st-min-rounds says otherwise; 160 rounds of settings.AB_ROUND_S take the time 40 rounds of 0.1 s
# took (at load 8 one pair of 20 rounds of 0.1 s had missed a +10 % change that 40 caught)
AB_VERSION_RATIOS = 160


def version_rounds(pairs: int, asked: int | None) -> int:
    """The most rounds per worker pair and side: ``asked`` (--s2st-min-rounds), else AB_VERSION_RATIOS shared."""
    return asked or -(-AB_VERSION_RATIOS // max(1, pairs))


# a worker of a pair after the first: no memory, FLOPs, tensor or instruction pass (its timed rounds are all the
# controller reads of it), which halves the untimed work of two pairs (docs/records/measurement.md)
ROUNDS_ONLY = {"memory": "off", "flops": "off", "tensor_memory": "off", "instructions": "off"}


# what no worker writes: the session's results are the controller's (the summary file, from the command line or an
# ini); the head's dumps are the first head worker's (two workers writing one folder would race)
NO_SUMMARY = {"summary": None}  # None: not given (the default), whatever the ini says


def worker_settings(spec: dict) -> dict:
    """What a worker's own settings become: a pair after the first only times its rounds (ROUNDS_ONLY); no worker
    writes a summary file, and only the first head worker dumps what its benchmarks produce."""
    out = dict(NO_SUMMARY, **(ROUNDS_ONLY if spec.get("pair") else {}))
    if spec.get("pair") or spec.get("side") != "head":
        out["dump_dir"] = None
    return out


def configure(config: pytest.Config, state: SessionState) -> None:
    """Registers the controller (--s2st-ab-base) or the worker (started by a controller); refuses what cannot
    go with it before any test runs."""
    spec = worker_spec()
    if spec is not None:
        state.explicit.update(worker_settings(spec))
        worker = VersionsWorker(config, spec)
        state.code_versions = worker
        config.pluginmanager.register(worker, "s2st-ab-worker")
        return
    ref = state.option("ab_base")
    if ref is None or hasattr(config, "workerinput"):
        return
    for clash, given in (("--s2st-processes", state.option("processes")),  # it sets -n itself: named first
                         ("-n", getattr(config.option, "numprocesses", None))):
        if given:
            raise pytest.UsageError(f"--s2st-ab-base {ref}: starts its own worker processes; drop {clash}")
    try:
        controller = VersionsController(config, state, ref)
    except S2STError as exc:
        raise pytest.UsageError(str(exc)) from None
    state.code_versions = controller
    config.pluginmanager.register(controller, "s2st-ab-controller")


def _pythonpath(root: Path) -> list[Path]:
    return [root / "src", root] if (root / "src").is_dir() else [root]


class VersionsController:
    controller: Literal[True] = True  # protocols.CodeVersions tells the two apart by it

    def __init__(self, config: pytest.Config, state: SessionState, ref: str):
        from .versions.worktree import Worktree  # lazy: plugin load

        self.config, self.state, self.ref = config, state, ref
        self.start = Path(config.invocation_params.dir)
        self.worktree = Worktree(self.start, ref)
        self.driver: Any = None
        # each benchmark's Compared: the head's rounds become its pytest-benchmark row
        self.compared: dict[str, Any] = {}

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """The workers start now, beside this session's own collection (they wait for its benchmarks' names):
        nothing is started for a run that collects or lists and runs nothing."""
        from .versions.driver import Driver, Side, worker_args  # lazy: heavy
        from .versions.paths import BasePaths  # lazy: plugin load

        option = self.config.option
        if any(getattr(option, name, False) for name in ("collectonly", "showfixtures", "show_fixtures_per_test")):
            return
        # a module of one side that fails to collect is that module's benchmarks' reason, not the end of the side
        args = worker_args(list(self.config.invocation_params.args)) + ["--continue-on-collection-errors"]
        base_paths = BasePaths(self.worktree, self.start)
        base_args = base_paths.args(args)
        sides = {"head": Side(self.start, args, self.worktree.repository, _pythonpath(self.worktree.repository)),
                 "base": Side(self.worktree.mapped(self.start), base_args, self.worktree.path,
                              _pythonpath(self.worktree.path), tuple(base_paths.absent))}
        logs = Path(self.state.plan_evidence_root()) / "ab-workers"  # kept: each worker's own output
        self.driver = Driver(sides, logs, self.state.option("ab_pairs"))

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        from .ab.stopping import StoppingRule  # lazy: heavy

        if self.driver is None:
            return
        items = [item.nodeid for item in session.items if "s2st_benchmark" in getattr(item, "fixturenames", ())]
        if not items:  # nothing to compare: the workers go (they run nothing)
            self.driver.close()
            self.driver = None
            return
        pairs = self.state.option("ab_pairs")
        rule = StoppingRule.for_limits(version_rounds(pairs, self.state.option("min_rounds")),
                                       self.state.option("compare_fail") or (), self.estimator(), pairs)
        self.driver.begin(items, rule, self.state.option("ab_round_s"))

    def estimator(self, chosen: str | None = None) -> Any:
        """The A/B estimator of a test: the one it chose (``s2st_benchmark(..., ab_estimator=)``), else
        --s2st-ab-estimator's (checked when the session was configured)."""
        from .ab import estimators  # lazy: heavy

        if chosen is None:
            return estimators.estimator(self.state.option("ab_estimator"))
        try:
            return estimators.chosen(chosen)
        except S2STError as exc:
            fail(exc)

    def compare(self, item: Node, ab_estimator: str | None = None) -> Measurement:
        """The test's measurement: the head's, its baseline the base's, ``info["ab"]`` the paired change by the
        test's estimator (``ab_estimator``, else the session's)."""
        from .ab.code_versions import ab_record  # lazy: heavy
        from .measurement import Measurement  # lazy: plugin load

        if self.driver is None:
            fail(f"--s2st-ab-base {self.ref}: no worker runs {item.nodeid}")
        estimator = self.estimator(ab_estimator)
        compared = self.driver.compare(item.nodeid, estimator)
        self.compared[item.nodeid] = compared
        if compared.missing is not None:
            measurement = Measurement(item.name, "?")
            measurement.baseline = Measurement(f"{item.name} baseline", "?")
        else:
            measurement = Measurement.from_dict(compared.head[0])
            measurement.baseline = Measurement.from_dict(compared.base[0])
        measurement.info["ab"] = ab_record(compared, self.ref, self.worktree.sha, self.worktree.head_sha,
                                           self.state.option("ab_round_s"), estimator).to_dict()
        return measurement

    def head_rounds(self, item: Node) -> list[float]:
        """The head's timed rounds of every worker pair (wall seconds per sample): its pytest-benchmark row."""
        compared = self.compared.get(item.nodeid)
        return [r for _, head in (compared.sets if compared is not None else ()) for r in head]

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.close()

    def close(self) -> None:
        driver, self.driver = self.driver, None
        try:
            if driver is not None:
                driver.close()
        finally:
            self.worktree.close()


class VersionsWorker:
    controller: Literal[False] = False

    def __init__(self, config: pytest.Config, spec: dict):
        from .versions.worker import Worker  # lazy: plugin load

        self.config = config
        try:
            self.worker = Worker(spec)
        except Exception as exc:  # noqa: BLE001 -- the controller sees this process exit before it connected
            raise pytest.UsageError(f"s2st code-version worker: cannot reach the controller ({exc})") from None

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, session: pytest.Session, config: pytest.Config, items: list) -> None:
        wanted = self.worker.items()
        kept = [item for item in items if item.nodeid in wanted]
        dropped = [item for item in items if item.nodeid not in wanted]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = kept

    def serve(self, item: Node, rounds: TimedRounds, model: Any = None) -> None:
        from .versions.worker import Skipped  # lazy: plugin load

        origins = {"benchmark module": _file_of(getattr(item, "module", None)),
                   "model module": _file_of(model) if model is not None else None}
        try:
            self.worker.serve(item.nodeid, rounds, {k: v for k, v in origins.items() if v})
        except Skipped:
            pytest.skip("the controller does not compare this benchmark")

    def measured(self, item: Node, measurement: dict) -> None:
        self.worker.measured(item.nodeid, measurement)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed:
            lines = [line for line in str(report.longreprtext).splitlines() if line.strip()]
            self.worker.failed(report.nodeid, f"{report.when} failed: {lines[-1].strip() if lines else '?'}")

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        """A module that cannot be collected (a syntax error, a failed import): every benchmark in it is named with
        the error, not "no such benchmark there"."""
        if report.failed:
            said = error_line(str(report.longreprtext)).replace(f"{self.config.rootpath}{os.sep}", "")
            self.worker.failed(report.nodeid, f"collecting {report.nodeid or 'the session'} failed: {said}")

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        self.exitstatus = int(exitstatus)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.worker.close(getattr(self, "exitstatus", None))


def _file_of(obj: Any) -> str | None:
    """The file the module of ``obj`` (a module, function, method, class, partial or instance) was loaded from."""
    if obj is None:
        return None
    while isinstance(obj, functools.partial):
        obj = obj.func
    if inspect.ismodule(obj):
        module = obj
    else:
        owner = obj if inspect.isfunction(obj) or inspect.ismethod(obj) or inspect.isclass(obj) else type(obj)
        module = sys.modules.get(getattr(owner, "__module__", None) or "")
    path = getattr(module, "__file__", None)
    return str(Path(path).resolve()) if isinstance(path, str) else None


_PLACE = r'File "([^"]+)", line (\d+)|^\s*([^\s:"]+\.py):(\d+)'  # a Python traceback's place, or pytest's


def error_line(text: str) -> str:
    """pytest's long report as one line: the error's last line and the last place (file:line) it names."""
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    errors = [line[1:].strip() for line in lines if line.startswith("E ")]
    places = [":".join(g for g in m.groups() if g) for line in lines for m in [re.search(_PLACE, line)] if m]
    said = errors[-1] if errors else (lines[-1].strip() if lines else "?")
    return f"{said} ({places[-1]})" if places else said
