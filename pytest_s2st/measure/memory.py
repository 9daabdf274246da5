"""Peak host memory of one call: absolute peak RSS and the peak above the RSS just before it.

Two methods, both measuring the whole process:
- "vmhwm": reset the kernel's RSS high-water mark (write "5" to /proc/self/clear_refs), run the call,
  read VmHWM from /proc/self/status. No sampling, but Linux-only and needs clear_refs writable; the kernel's
  RSS counters are batched, so expect ~0.1-0.3 MiB of slack (200 MiB measured as 199.8-199.9 here).
- "memory_profiler": a child polls our RSS every `interval` seconds (memory_profiler's reader) while the call
  runs in-process. Sampling: a peak shorter than the interval can be missed, so the value is a lower bound.
  The child is spawned once per probe, never forked (see RssSampler), and stopped by ``close()``.
No torch import here: RSS covers numpy and torch CPU tensors alike (tracemalloc would miss torch).
"""
from __future__ import annotations

import gc
import os
import subprocess
import sys
import time
import weakref
from typing import Any, Callable

from pytest_s2st.errors import S2STError
from pytest_s2st.measure.record import Metric

MIB = 2**20
METHODS = ("vmhwm", "memory_profiler", "off")
MEMORY_PROFILER_INTERVAL_S = 0.001
_STATUS = "/proc/self/status"
_CLEAR_REFS = "/proc/self/clear_refs"


def _status_kib(field: str) -> int:
    """One 'VmXXX:  N kB' field of /proc/self/status, in KiB."""
    with open(_STATUS) as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise OSError(f"{field} not in {_STATUS}")


def _reset_hwm() -> None:
    # "5" resets only the peak-RSS counter (VmHWM) to the current RSS; page tables are untouched.
    with open(_CLEAR_REFS, "w") as fh:
        fh.write("5")


def settled_rss_mib() -> float:
    """RSS now, after collecting cyclic garbage: a start reading that still holds an earlier test's unreachable
    arrays (freed later, mid-case) would put the case's peak below its start and read its rise as 0."""
    gc.collect()
    return current_rss_mib()


def current_rss_mib() -> float:
    """RSS of this process now, in MiB (2**20 bytes)."""
    try:
        return _status_kib("VmRSS") / 1024
    except OSError:
        import psutil  # lazy: plugin load

        return psutil.Process().memory_info().rss / MIB


def _vmhwm_unavailable() -> str | None:
    """Why the vmhwm method cannot be used here, or None when it can."""
    try:
        _status_kib("VmHWM")
        _reset_hwm()
    except (OSError, ValueError) as exc:
        return f"vmhwm unavailable ({type(exc).__name__}: {exc})"
    return None


def _memory_profiler_unavailable() -> str | None:
    try:
        # lazy: optional
        import memory_profiler  # noqa: F401
    except Exception as exc:  # ImportError, or a broken install
        return f"memory_profiler unavailable ({type(exc).__name__}: {exc})"
    return None


def resolve_memory_method(asked: str) -> tuple[str, str | None]:
    """(method actually used, why it differs from `asked` or None). Falls back vmhwm <-> memory_profiler."""
    if asked not in METHODS:
        raise S2STError(f"--s2st-memory={asked}: unknown method, expected one of {', '.join(METHODS)}")
    if asked == "off":
        return "off", None
    checks = {"vmhwm": _vmhwm_unavailable, "memory_profiler": _memory_profiler_unavailable}
    why_not = checks[asked]()
    if why_not is None:
        return asked, None
    other = "memory_profiler" if asked == "vmhwm" else "vmhwm"
    other_why_not = checks[other]()
    if other_why_not is None:
        return other, f"{why_not}; using {other}"
    return "off", f"{why_not}; {other_why_not}"


class MemoryProbe:
    """Runs a call once and reports {"peak_rss_mib", "peak_delta_mib"} for it.

    `method` must come from resolve_memory_method. `reason` is what "off" reports when the method is off
    because nothing worked (resolve_memory_method's reason), rather than because the user disabled it.
    """

    def __init__(self, method: str, reason: str | None = None):
        if method not in METHODS:
            raise S2STError(f"--s2st-memory={method}: unknown method, expected one of {', '.join(METHODS)}")
        self.method = method
        self.off_reason = reason or "memory measurement disabled (--s2st-memory=off)"
        self._sampler: RssSampler | None = None

    def measure(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, dict[str, Metric]]:
        if self.method == "vmhwm":
            return self._vmhwm(fn, args, kwargs)
        if self.method == "memory_profiler":
            return self._memory_profiler(fn, args, kwargs)
        result = fn(*args, **kwargs)
        off = Metric.missing("off", self.off_reason)
        return result, {"peak_rss_mib": off, "peak_delta_mib": Metric.missing("off", self.off_reason)}

    def _vmhwm(self, fn, args, kwargs):
        _reset_hwm()
        baseline = _status_kib("VmRSS")
        t0 = time.perf_counter()
        result = fn(*args, **kwargs)
        elapsed = time.perf_counter() - t0
        peak = max(_status_kib("VmHWM"), baseline)
        details = {"baseline_rss_mib": baseline / 1024, "call_s": elapsed}
        return result, _metrics(peak / 1024, baseline / 1024, "vmhwm", details)

    def _memory_profiler(self, fn, args, kwargs):
        sampler = self._sampler
        if sampler is None or not sampler.alive():
            sampler = self._sampler = RssSampler(MEMORY_PROFILER_INTERVAL_S)
        sampler.begin()  # returns once the sampler has read the RSS once
        baseline = current_rss_mib()  # in-process, right before fn
        t0 = time.perf_counter()
        try:
            result = fn(*args, **kwargs)
        except BaseException:
            self.close()  # no polling child outlives a failed call
            raise
        call_s = time.perf_counter() - t0
        peak, polls = sampler.end()
        peak = max(peak, baseline)
        details = {
            "baseline_rss_mib": baseline,
            "call_s": call_s,
            "interval_s": MEMORY_PROFILER_INTERVAL_S,
            "polls": polls,
            "sampler": "memory_profiler's RSS reader polled from one spawned (not forked) process per probe",
            "sampled": "peaks shorter than the polling interval can be missed: a lower bound",
        }
        return result, _metrics(peak, baseline, "memory_profiler", details)

    def close(self) -> None:
        """Stop the sampler process (the memory pass is over: nothing of it may run beside the timed pass)."""
        if self._sampler is not None:
            self._sampler.close()
            self._sampler = None


# The sampler runs in its own interpreter, started with subprocess (vfork/exec): memory_profiler.memory_usage
# forks this process once per call instead, and every fork write-protects all of this process's pages, so the
# calls after it (the timed rounds, with the FLOPs pass off) paid a copy-on-write fault per page they wrote
# (issue 11 item 4). Protocol on its stdin/stdout, one line each: "b" -> it reads the RSS once, answers "r",
# then polls every interval until "e" arrives -> one last read, answers "<peak MiB> <polls>". EOF ends it.
_SAMPLER_CODE = r"""
import os, select, sys
pid, interval = int(sys.argv[1]), float(sys.argv[2])
import memory_profiler  # noqa: F401  -- the method's dependency, checked where it is chosen
import psutil
# memory_profiler's psutil reader (memory_info()[0] / 2**20) on one Process object: its _get_memory builds a new
# one per poll, which reads /proc/<pid>/stat again every millisecond
process = psutil.Process(pid)
def rss():
    return process.memory_info()[0] / 1048576
while True:
    line = sys.stdin.readline()
    if not line:
        break
    if line.strip() != "b":
        continue
    peak, polls = rss(), 1
    sys.stdout.write("r\n"); sys.stdout.flush()
    while True:
        ready = select.select([sys.stdin], [], [], interval)[0]
        peak, polls = max(peak, rss()), polls + 1
        if ready:
            sys.stdin.readline()
            break
    sys.stdout.write(f"{peak!r} {polls}\n"); sys.stdout.flush()
"""
_MAX_REPLY = 256  # bytes of one sampler answer


class RssSampler:
    """A long-lived RSS poller of this process (memory_profiler's reader), in a spawned child."""

    def __init__(self, interval: float):
        self.proc = subprocess.Popen([sys.executable, "-c", _SAMPLER_CODE, str(os.getpid()), repr(interval)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        self._finalizer = weakref.finalize(self, _stop_sampler, self.proc)  # a dropped probe stops its child too

    def alive(self) -> bool:
        return self.proc.poll() is None

    def _ask(self, line: str) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        reply = self.proc.stdout.readline(_MAX_REPLY)
        if not reply:
            raise S2STError(f"memory_profiler sampler (pid {self.proc.pid}) stopped: exit status {self.proc.poll()}")
        return reply.strip()

    def begin(self) -> None:
        self._ask("b")

    def end(self) -> tuple[float, int]:
        reply = self._ask("e")
        try:
            peak, polls = reply.split()
            return float(peak), int(polls)
        except ValueError:
            raise S2STError(f"memory_profiler sampler (pid {self.proc.pid}) answered {reply[:80]!r}, "
                            "expected '<peak MiB> <polls>'") from None

    def close(self) -> None:
        self._finalizer()


def _stop_sampler(proc) -> None:
    if proc.poll() is None:
        proc.kill()  # it holds no state worth a graceful stop; killing never waits on a busy poll
    proc.wait()
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None:
            try:
                pipe.close()
            except OSError:
                pass


def _metrics(peak_mib: float, baseline_mib: float, method: str, details: dict) -> dict[str, Metric]:
    return {
        "peak_rss_mib": Metric(peak_mib, method, details=dict(details)),
        "peak_delta_mib": Metric(peak_mib - baseline_mib, method, details=dict(details)),
    }


def rss_rise(peak: Metric, start_mib: float | None, start_what: str) -> Metric:
    """The case's own RSS rise: its peak RSS (the whole process's high-water mark during a forward) minus the
    process's RSS at the case's start, so what earlier cases left resident is not counted (issue 32 item 8). A peak
    below the start (the process gave memory back meanwhile) rose by 0. The whole-process peak stays in
    peak_rss_mib."""
    if peak.value is None or start_mib is None:
        return Metric.missing(peak.method, peak.reason or "no RSS at the case's start")
    details = {"start_rss_mib": start_mib, "start": start_what, "peak_rss_mib": peak.value}
    return Metric(max(0.0, peak.value - start_mib), peak.method, details=details)
