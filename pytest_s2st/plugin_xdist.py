"""pytest-xdist glue: N workers, one result.

Registered by plugin.py only when xdist distributes the session (a worker, or a controller with
``-n N``), so a plain run never loads it. Every worker times its cases for real (pytest-benchmark's
"disabled because xdist plugin is active" is undone, see benchmark_compat.enable_under_xdist) and,
at its session's end, puts everything it measured into ``config.workeroutput`` -- xdist's own
channel back to the controller. The controller reads it in ``pytest_testnodedown`` and prints one
extra table, one service table, one set of verdicts, and saves one pytest-benchmark JSON.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from typing import Any

import pytest

from .benchmark_compat import absorb_benchmarks, enable_under_xdist, export_benchmarks
from .distribute import fold_worker_payloads
from .session import session_of

PAYLOAD = "s2st"  # key in workeroutput
LEVEL_PARTS_DIST = ("load", "loadgroup")
_PART_SUFFIX = re.compile(r"-p([1-9][0-9]*)of([1-9][0-9]*)\]")


def part_of(nodeid: str) -> int | None:
    """k of an item ``...[<case>-c<level>-p<k>of<N>]`` (--s2st-level-parts), else None."""
    match = _PART_SUFFIX.search(nodeid)
    return int(match.group(1)) if match else None


def level_parts_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's loadgroup scheduler, except that the parts of every level are placed before anything else:
    part k of every level on the k-th worker xdist lists, in collection order. Each of those N workers meets the
    levels' rendezvous in the same order (no worker holds a part another part waits for behind its own
    part of a later level), and xdist's own rule -- a worker runs an item once it has the next one or is
    told to shut down -- still feeds every worker. The other items follow as loadgroup schedules them."""
    from xdist.scheduler import LoadGroupScheduling  # lazy: optional

    class LevelPartsScheduling(LoadGroupScheduling):
        def schedule(self) -> None:
            if self.collection is not None or not self.collection_is_completed:
                return super().schedule()
            if not self._check_nodes_have_same_collection():
                self.log("**Different tests collected, aborting run**")
                return
            self.collection = list(next(iter(self.registered_collections.values())))
            if not self.collection:
                return
            units: dict[str, dict[str, bool]] = {}
            for nodeid in self.collection:
                units.setdefault(self._split_scope(nodeid), {})[nodeid] = False
            nodes = self.nodes
            for scope, unit in units.items():
                k = part_of(scope) if len(unit) == 1 and scope in unit else None
                if k is None:
                    self.workqueue[scope] = unit
                    continue
                node = nodes[(k - 1) % len(nodes)]
                self.assigned_work.setdefault(node, {})[scope] = unit
                node.send_runtest_some([self.registered_collections[node].index(scope)])
            for node in nodes:
                self._reschedule(node)
            if not self.workqueue:
                for node in nodes:
                    node.shutdown()

    return LevelPartsScheduling(config, log)


class XdistGlue:
    def __init__(self, config: pytest.Config):
        self.config = config
        self.worker = hasattr(config, "workerinput")
        self._collected: list[tuple[pytest.Item, str]] = []
        # --s2st-processes: every worker runs every test (--dist each); their payloads fold into one side at the end
        self.repeats = not self.worker and config.getvalue("dist") == "each" and bool(
            session_of(config).option("processes"))
        self._payloads: list[dict[str, Any]] = []
        self._turn: str | None = None
        if not self.worker:  # the workers xdist starts (-n N); a crashed worker's replacement is not another
            session_of(config).workers = len(getattr(config.option, "tx", None) or [])
            self._check_level_parts()
        if self.repeats:
            config.pluginmanager.register(_FoldRepeats(self), "s2st-xdist-repeats")

    def _check_level_parts(self) -> None:
        """--s2st-level-parts N runs the N parts of a level at once: N workers at least, load scheduling."""
        state = session_of(self.config)
        parts, dist = state.option("level_parts"), self.config.getvalue("dist")
        if parts <= 1:
            return
        if dist not in LEVEL_PARTS_DIST:
            raise pytest.UsageError(f"{state.source('level_parts')} {parts}: needs --dist load or loadgroup, "
                                    f"got --dist {dist} (the parts of a level must run on different workers)")
        if state.workers < parts:
            raise pytest.UsageError(f"{state.source('level_parts')} {parts}: needs at least {parts} xdist workers "
                                    f"(-n {parts}), got {state.workers}")

    # ------------------------------------------------------------------ both sides

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        enable_under_xdist(self.config, worker=self.worker)

    # ------------------------------------------------------------------ controller

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        """One evidence root for the session, named here and handed to every worker."""
        node.workerinput["s2st_evidence_root"] = session_of(self.config).plan_evidence_root()
        if self.repeats:  # the lock file the workers take turns on (session.timing_turn)
            if self._turn is None:
                handle, self._turn = tempfile.mkstemp(prefix="s2st-turn-")

                os.close(handle)
            node.workerinput["s2st_turn"] = self._turn

    @pytest.hookimpl(optionalhook=True, tryfirst=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        """With level parts: loadgroup scheduling, the parts placed first (see LevelPartsScheduling)."""
        if session_of(config).option("level_parts") <= 1:
            return None
        return level_parts_scheduler(config, log)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """A worker finished: its rows join the controller's (a crashed worker sends none; xdist
        reports its tests as crashed)."""
        payload = (getattr(node, "workeroutput", None) or {}).get(PAYLOAD)
        if payload is None:
            return
        data = json.loads(payload)
        if self.repeats:
            self._payloads.append(data)
            return
        session_of(self.config).absorb(data["session"])
        absorb_benchmarks(self.config, data["benchmarks"])

    # ------------------------------------------------------------------ worker

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        # before xdist's own hook appends "@<group>" to the nodeids under --dist loadgroup
        self._collected = [(item, item.nodeid) for item in items]

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        state = session_of(self.config)
        state.original_nodeid.update({item.nodeid: plain for item, plain in self._collected
                                      if item.nodeid != plain})
        self._collected = []

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if not self.worker:
            return
        state = session_of(self.config)
        payload = {"session": state.export(), "benchmarks": export_benchmarks(self.config, state.original_nodeid)}
        # xdist's workerfinished event carries it after this hook (execnet: plain types, so one JSON string)
        self.config.workeroutput[PAYLOAD] = json.dumps(payload, default=str)


class _FoldRepeats:
    """--s2st-processes, on the controller: before pytest-benchmark saves (its sessionfinish wrapper runs inside
    this one) and before the s2st compare, the workers' runs of each benchmark become one row of N runs."""

    def __init__(self, glue: XdistGlue):
        self.glue = glue

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session):
        glue = self.glue
        if glue._payloads:
            folded = fold_worker_payloads(glue._payloads)
            session_of(glue.config).absorb(folded["session"])
            absorb_benchmarks(glue.config, folded["benchmarks"])
            glue._payloads = []
        if glue._turn is not None:
            with contextlib.suppress(OSError):
                os.unlink(glue._turn)
        yield
