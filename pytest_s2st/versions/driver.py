"""The controller of a code-version A/B: worker pairs (one process per side, each a pytest session in its own tree)
run every compared benchmark's untimed passes on their own; at its timing pass each waits. When every worker has
arrived at a benchmark, the controller sizes the rounds (both sides the same calls, about ``round_s`` on the slower
side) and orders them one at a time -- base and head of each pair taking turns, ABBA, the pairs interleaved and
their first side alternated -- so exactly one process times while all others sleep, and a drift of the machine
falls on both sides alike. Several pairs of fresh processes average out each process's own layout.
"""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

from ..ab.stopping import StoppingRule
from ..rounds import calls_per_round
from . import channel

CONNECT_S = 600.0    # a worker's start (imports, collection) until it says hello
ARRIVE_S = 4 * 3600.0  # a worker's untimed passes until it arrives at the next timing pass
MEASURED_S = 3600.0  # after its last round until its measurement arrives
ROUND_SLACK_S = 60.0  # a round's answer may take 50x its calibrated time plus this
LOG_TAIL = 5         # lines of a dead worker's log in its reason
SIDES = ("base", "head")

# options the workers must not get: the controller's own, and those that write or judge a session's results
# (each worker's results come back to the controller); (flag, takes a value)
DROPPED = (("--s2st-ab-base", True), ("--s2st-ab-pairs", True), ("--s2st-ab-estimator", True),
           ("--benchmark-json", True), ("--benchmark-save", True), ("--benchmark-autosave", False),
           ("--junitxml", True), ("--junit-xml", True), ("--report-log", True), ("--s2st-plot", True), ("-n", True),
           ("--numprocesses", True), ("--dist", True),
           ("--s2st-processes", True), ("--s2st-compare-fail", True), ("--benchmark-compare-fail", True),
           ("--s2st-strict", False), ("--benchmark-compare", False), ("--s2st-history", True),
           ("--s2st-history-fail", True), ("--s2st-history-window", True))

CONTROLLER_ONLY_ENV = ("GITHUB_STEP_SUMMARY",)  # the job's summary has the controller's table, not each worker's

# a worker is pytest's own entry point (as ``python -m pytest``), ended once every atexit handler has run, without
# the interpreter's teardown: with torch loaded that is about 0.35 s of CPU a worker (docs/records/measurement.md)
WORKER_MAIN = ("import atexit, os, sys, pytest\n"
               "code = pytest.console_main()\n"
               "sys.stdout.flush(); sys.stderr.flush()\n"
               "atexit._run_exitfuncs()\n"
               "os._exit(int(code))\n")


def worker_args(args: Sequence[str]) -> list[str]:
    """The controller's command line for a worker: DROPPED options removed (the base's paths are then placed in
    its own tree: versions/paths.py)."""
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        hit = next(((flag, value) for flag, value in DROPPED if name == flag
                    or flag == "-n" and arg.startswith("-n") and arg[2:].isdigit()), None)
        if hit is not None:
            skip = hit[1] and "=" not in arg and not (hit[0] == "-n" and arg[2:].isdigit())
            continue
        out.append(arg)
    return out


@contextlib.contextmanager
def same_cpu(pids: Sequence[int]):
    """While the rounds run, every timing worker on one CPU (Linux): only one of them runs at a time, so this costs
    nothing, and both sides of a pair share that CPU's neighbours (at load 8 it did not narrow the round ratios by
    itself: own times did, docs/records/measurement.md). Their own CPUs are given back afterwards (the untimed
    passes run in parallel)."""
    getaffinity = getattr(os, "sched_getaffinity", None)
    setaffinity = getattr(os, "sched_setaffinity", None)
    if getaffinity is None or setaffinity is None:
        yield
        return
    saved = {}
    try:
        cpu = max(getaffinity(0))
        for task in (t for pid in pids for t in _threads(pid)):  # every thread: torch's pools too
            try:
                saved[task] = getaffinity(task)
                setaffinity(task, {cpu})
            except OSError:  # gone meanwhile
                continue
        yield
    finally:
        for pid, cpus in saved.items():
            try:
                setaffinity(pid, cpus)
            except OSError:
                pass


def _threads(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except (OSError, ValueError):
        return [pid]


@dataclass(eq=False)  # one object per process: hashed by identity
class WorkerProcess:
    side: str
    pair: int
    process: subprocess.Popen
    log: Path
    conn: Any = None
    parked: str | None = None         # the benchmark it waits at
    samples: int | None = None
    failed: dict[str, str] = field(default_factory=dict)   # by nodeid, or a module's nodeid that failed to collect
    origins: dict[str, str] = field(default_factory=dict)  # where the benchmark it waits at came from
    measured: dict[str, dict] = field(default_factory=dict)
    gone: str | None = None           # why it can take no more orders

    @property
    def name(self) -> str:
        return f"{self.side} worker {self.pair + 1}"

    def die(self, why: str) -> None:
        if self.gone is None:
            self.gone = f"{self.name} {why}{self.log_tail()}"
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)

    def log_tail(self) -> str:
        try:
            lines = [line.strip() for line in self.log.read_text(errors="replace").splitlines() if line.strip()]
        except OSError:
            return ""
        return f" (log {self.log}: {' | '.join(lines[-LOG_TAIL:])})" if lines else f" (log {self.log}: empty)"


@dataclass
class Compared:
    """What the workers of both sides gave one benchmark."""

    nodeid: str
    base: list[dict] = field(default_factory=list)   # each pair's measurement dict, when it arrived
    head: list[dict] = field(default_factory=list)
    sets: list[tuple[list[float], list[float]]] = field(default_factory=list)  # per pair: (base, head) rounds
    own_sets: list[tuple[list[float], list[float]]] | None = None  # the same less each round's run-queue wait
    calls: int | None = None
    stopped: str | None = None  # why the rounds ended before the most (ab/stopping.py)
    word_confidence: float | None = None  # then the looks' level, which the word must hold at too (stopping.held)
    missing: str | None = None  # why there is no verdict (a side never reached its timing, died, refused)


@dataclass(frozen=True)
class Side:
    """How one side's workers start, and whose code they may run."""

    cwd: Path
    args: list[str]
    root: Path                 # its tree: a benchmark or model module imported from the other side's is refused
    pythonpath: list[Path]
    absent: tuple[str, ...] = ()  # paths the user named that this side's tree does not have


class Driver:
    """``pairs`` worker pairs of the ``sides`` ({"base": Side, "head": Side}), logs in ``log_dir``. The workers start
    at once, while the controller collects its own tests (two cores: a start is mostly imports); ``begin`` then names
    the benchmarks they compare and how the rounds stop."""

    def __init__(self, sides: dict[str, Side], log_dir: Path, pairs: int):
        self.sides = sides
        self.order: dict[str, int] = {}
        self.rule: StoppingRule | None = None  # begin() sets them
        self.round_s = 0.0
        self.log_dir = log_dir
        log_dir.mkdir(parents=True, exist_ok=True)
        self.listener, key = channel.listener(2 * pairs)
        self.workers: list[WorkerProcess] = []
        for pair in range(pairs):
            for name in SIDES:
                side = sides[name]
                spec = {"address": list(self.listener.address), "key": key.hex(), "side": name, "pair": pair}
                env = {k: v for k, v in os.environ.items() if k not in CONTROLLER_ONLY_ENV}
                env[channel.ENV] = json.dumps(spec)
                env["PYTHONPATH"] = os.pathsep.join([str(p) for p in side.pythonpath]
                                                    + [p for p in [os.environ.get("PYTHONPATH")] if p])
                log = log_dir / f"{name}-{pair + 1}.log"
                with open(log, "wb") as out:
                    process = subprocess.Popen([sys.executable, "-c", WORKER_MAIN, *side.args], cwd=side.cwd, env=env,
                                               stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
                self.workers.append(WorkerProcess(name, pair, process, log))
        self._accepting = threading.Thread(target=self._accept, name="s2st-ab-accept", daemon=True)
        self._accepting.start()

    def begin(self, items: Sequence[str], rule: StoppingRule, round_s: float) -> None:
        """Every worker runs ``items`` (the controller's collected benchmarks, in its order) and nothing else; each
        is compared by ``rule`` with rounds of about ``round_s``."""
        self.order = {nodeid: i for i, nodeid in enumerate(items)}
        self.rule, self.round_s = rule, round_s
        for w in self.workers:
            if self._connected(w):
                self._send(w, {"op": "items", "nodeids": list(items)})

    # ------------------------------------------------------------------ connections and messages

    def _accept(self) -> None:
        wanted = {(w.side, w.pair): w for w in self.workers}
        while any(w.conn is None for w in wanted.values()):
            try:
                conn = self.listener.accept()
                hello = channel.receive(conn, 30.0)
            except Exception:  # noqa: BLE001 -- a failed handshake (wrong key) or the listener closed
                if self.listener is None:
                    return
                continue
            worker = wanted.get(((hello or {}).get("side"), (hello or {}).get("pair")))
            if worker is None or worker.conn is not None:
                conn.close()
                continue
            worker.conn = conn

    def _connected(self, w: WorkerProcess) -> bool:
        deadline = time.monotonic() + CONNECT_S
        while w.conn is None and w.gone is None:
            if w.process.poll() is not None:
                w.die(f"exited ({w.process.returncode}) before it connected: it failed at start, or the "
                      "pytest-s2st it imports has no code-version worker")
            elif time.monotonic() > deadline:
                w.die(f"did not connect within {CONNECT_S:g} s")
            else:
                time.sleep(0.05)
        return w.gone is None

    def _receive(self, w: WorkerProcess, timeout: float, what: str) -> dict | None:
        """The worker's next message (its bookkeeping done); None when it is gone."""
        deadline = time.monotonic() + timeout
        while w.gone is None:
            try:
                message = channel.receive(w.conn, 0.5)
            except channel.ChannelClosed as exc:
                w.process.poll()
                w.die(f"went away while {what} ({exc}; exit code {w.process.returncode})")
                return None
            if message is None:
                if w.process.poll() is not None:
                    w.die(f"exited ({w.process.returncode}) while {what}")
                elif time.monotonic() > deadline:
                    w.die(f"sent nothing for {timeout:g} s while {what}")
                continue
            op = message.get("op")
            if op == "failed":
                w.failed[str(message.get("nodeid"))] = str(message.get("why"))
            elif op == "measured":
                w.measured[str(message.get("nodeid"))] = message.get("measurement") or {}
            elif op == "ready":
                w.parked, w.samples = str(message.get("nodeid")), message.get("samples")
                origins = message.get("origins")
                w.origins = {str(k): str(v) for k, v in origins.items()} if isinstance(origins, dict) else {}
            elif op == "bye":
                status = message.get("exitstatus")
                if status in (2, 3, 4):  # interrupted, internal or usage error: its own words say why
                    w.gone = f"{w.side}: its pytest session ended with exit code {status}{w.log_tail()}"
                else:
                    w.gone = f"{w.side}: no such benchmark there{self._absent(w.side)} (its session ended without " \
                             "reaching it)"
            return message
        return None

    def _send(self, w: WorkerProcess, message: dict) -> bool:
        """Whether ``message`` reached ``w``; a worker whose end is closed is gone."""
        try:
            channel.send(w.conn, message)
        except channel.ChannelClosed as exc:
            w.die(f"went away ({exc})")
            return False
        return True

    def _order(self, w: WorkerProcess, message: dict, timeout: float, what: str) -> dict | None:
        return self._receive(w, timeout, what) if self._send(w, message) else None

    def _arrive(self, w: WorkerProcess, nodeid: str) -> bool:
        """Whether ``w`` waits at ``nodeid``'s timing pass; it is released from any benchmark before it."""
        if not self._connected(w):
            return False
        here = self.order.get(nodeid, -1)
        while w.gone is None:
            if w.parked == nodeid:
                foreign = self._foreign(w)
                if foreign is None:
                    return True
                w.failed[nodeid] = foreign
                self._skip(w)
                return False
            if w.parked is not None:
                if self.order.get(w.parked, -1) >= here:
                    return False  # waits at a later one: this benchmark ended before its timing there
                try:
                    channel.send(w.conn, {"op": "skip"})
                except channel.ChannelClosed:
                    pass
                w.parked = None
                continue
            if self._failure(w, nodeid) is not None:
                return False
            self._receive(w, ARRIVE_S, f"running the untimed passes before {nodeid}")
        return False

    # ------------------------------------------------------------------ one benchmark

    def compare(self, nodeid: str, estimator: Any = None) -> Compared:
        """Both sides' rounds of ``nodeid``; ``estimator`` (ab/estimators.py) the stopping rule looks with, when the
        test chose its own."""
        result = Compared(nodeid)
        present = {w: self._arrive(w, nodeid) for w in self.workers}
        pairs = []
        for pair in sorted({w.pair for w in self.workers}):
            base, head = (next(w for w in self.workers if w.pair == pair and w.side == s) for s in SIDES)
            if present[base] and present[head]:
                pairs.append((base, head))
        if not pairs:
            result.missing = self._why_missing(nodeid, present)
            for w, here in present.items():
                if here:
                    self._skip(w)
            return result
        samples = {w.samples for pair in pairs for w in pair}
        if len(samples) != 1:
            result.missing = ("the sides ran different numbers of samples "
                              f"({', '.join(f'{w.name}: {w.samples}' for pair in pairs for w in pair)}): "
                              "not the same work")
            for w in (w for pair in pairs for w in pair):
                self._skip(w)
            return result
        timing = [w for pair in pairs for w in pair]
        with same_cpu([w.process.pid for w in timing]):
            rule = self.rule if estimator is None else replace(self.rule, estimator=estimator)
            self._rounds(result, pairs, samples.pop(), rule)
        return self._collect(result, pairs, nodeid)

    def _rounds(self, result: Compared, pairs: list, samples: int, rule: StoppingRule) -> None:
        per_call = 0.0
        for w in (w for pair in pairs for w in pair):
            answer = self._order(w, {"op": "calibrate", "budget_s": self.round_s / 2}, ARRIVE_S, "calibrating")
            per_call = max(per_call, float((answer or {}).get("s") or 0.0))

        calls = result.calls = calls_per_round(per_call, self.round_s, samples)
        patience = ROUND_SLACK_S + 50 * per_call * calls
        times: dict[WorkerProcess, list[float]] = {w: [] for pair in pairs for w in pair}
        own: dict[WorkerProcess, list[float | None]] = {w: [] for pair in pairs for w in pair}
        for i in range(rule.rounds):
            for j, (base, head) in enumerate(pairs):
                for w in ((base, head) if (i + j) % 2 == 0 else (head, base)):
                    answer = self._order(w, {"op": "round", "calls": calls}, patience, "timing a round")
                    if answer is None or answer.get("op") != "round":
                        result.missing = w.gone or f"{w.name} answered {answer!r} to a round"
                        self._release_all(times)
                        return
                    times[w].append(float(answer["s"]))
                    own[w].append(answer.get("own_s"))
            result.sets = [(times[base], times[head]) for base, head in pairs]
            result.own_sets = ([(own[base], own[head]) for base, head in pairs]
                               if all(v is not None for w in own for v in own[w]) else None)
            if rule.settled(i + 1, result.own_sets or result.sets):  # the rounds left cannot move the verdict
                result.stopped = f"decided after {i + 1} of {rule.rounds} rounds"
                result.word_confidence = rule.confidence
                break
        for w in times:
            self._done(w)

    def _collect(self, result: Compared, pairs: list, nodeid: str) -> Compared:
        """Each side's measurement, after its last round (the worker finishes its passes on its own)."""
        if result.missing is not None:
            return result
        for base, head in pairs:
            for w, into in ((base, result.base), (head, result.head)):
                while nodeid not in w.measured and w.gone is None and nodeid not in w.failed:
                    self._receive(w, MEASURED_S, "finishing its measurement")
                if nodeid in w.measured:
                    into.append(w.measured[nodeid])
        if not result.base or not result.head:
            result.missing = "; ".join(f"{w.name}: {w.failed.get(nodeid) or w.gone or 'no measurement'}"
                                       for pair in pairs for w in pair if nodeid not in w.measured)
        return result

    def _release(self, w: WorkerProcess, op: str) -> None:
        """A waiting worker goes on: ``done`` (its rounds are over) or ``skip`` (this benchmark is not compared)."""
        self._send(w, {"op": op})
        w.parked = None

    def _skip(self, w: WorkerProcess) -> None:
        self._release(w, "skip")

    def _done(self, w: WorkerProcess) -> None:
        self._release(w, "done")

    def _release_all(self, times: dict) -> None:
        for w in times:
            if w.gone is None:
                self._done(w)

    def _why_missing(self, nodeid: str, present: dict[WorkerProcess, bool]) -> str:
        reasons = []
        for side in SIDES:
            absent = [w for w, here in present.items() if w.side == side and not here]
            if not absent:
                continue
            w = absent[0]
            failure = self._failure(w, nodeid)
            if failure is not None:
                reasons.append(f"{side}: {failure}")
            elif w.gone is not None:
                reasons.append(w.gone)
            else:
                reasons.append(f"{side}: no such benchmark there{self._absent(side)} (or it ended before its timing "
                               "pass)")
        return "; ".join(reasons) or "no worker pair had both sides"

    @staticmethod
    def _failure(w: WorkerProcess, nodeid: str) -> str | None:
        """Why ``w`` failed ``nodeid``: the test itself, or the module (or folder) it is in failed to collect."""
        if nodeid in w.failed:
            return w.failed[nodeid]
        return next((why for key, why in w.failed.items() if key == "" or nodeid.startswith(f"{key}::")
                     or nodeid.startswith(f"{key}/")), None)

    def _absent(self, side: str) -> str:
        absent = self.sides[side].absent
        return f": {', '.join(absent)} not in the {side}'s tree" if absent else ""

    def _foreign(self, w: WorkerProcess) -> str | None:
        """Why ``w``'s benchmark would time the other side's code: its module or its model's module was imported
        from the other side's tree (None: its own, or from neither tree, e.g. an installed package)."""
        own = self.sides[w.side].root.resolve()
        other_side = next(s for s in SIDES if s != w.side)
        other = self.sides[other_side].root.resolve()
        for what, path in sorted(w.origins.items()):
            where = Path(path)
            if where.is_relative_to(other) and not where.is_relative_to(own):
                return (f"its {what} was imported from the {other_side}'s tree ({path}): refused, it would time "
                        f"the {other_side}'s code")
        return None

    # ------------------------------------------------------------------ the end

    def close(self) -> None:
        """Every worker told to finish (it runs out its remaining tests untimed), then ended; one that has not
        connected yet is ended at once (it has run nothing: the session ended before its tests); the listener is
        closed first, so no worker connects meanwhile."""
        listener, self.listener = self.listener, None
        if listener is not None:
            listener.close()
        for w in self.workers:
            if w.gone is None and w.conn is not None and w.parked is not None:
                self._skip(w)
        deadline = time.monotonic() + 60
        for w in self.workers:
            if w.conn is None:
                w.process.kill()
            else:
                try:
                    w.conn.close()
                except OSError:
                    pass
            try:
                w.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                w.process.kill()
                w.process.wait(timeout=30)
