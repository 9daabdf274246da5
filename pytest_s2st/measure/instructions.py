"""CPU instructions of one stage's forward, counted under valgrind's callgrind (pytest-free).

Wall clocks on a shared CI runner move by tens of percent between identical runs; the number of
instructions a call executes does not (the approach CodSpeed takes). Valgrind cannot attach to a
running process, so the count happens in a child process:

1. The parent writes a job: the resolved case (``Case.to_dict``, as the reference server gets it)
   and the pipeline's first prepared input (pickled, in a private temp folder). On the callable path
   (``s2st_benchmark(fn, inputs)``) the job carries the callable's pickle instead of a case, as
   ``--s2st-isolate`` does (isolated.py): a module-level function, a ``functools.partial`` of
   one or an object of an importable class is pickled by reference and re-created in the child (the
   parent's ``sys.path`` travels, so the test's own modules import there); a lambda, a closure or a
   local function cannot be, and the metric says so in one line naming it.
2. ``python -m pytest_s2st.instr_child`` runs under ``valgrind --tool=callgrind
   --instr-atstart=no`` (under ``setarch -R`` where it works: no address randomisation): it starts
   uninstrumented (cheap), builds the pipeline from the case (or re-creates the callable) on cpu
   with one torch thread and PYTHONHASHSEED=0, and for every stage in order warms it up natively
   (``warmup`` calls, at least one), then switches instrumentation on and, with the garbage collector
   collected and disabled, counts twice between client requests (CALLGRIND_ZERO_STATS ...
   CALLGRIND_DUMP_STATS_AT): a no-op bound method on the same input, then ``stage.forward(x)``.
   The stage's output feeds the next stage, as in the runner.
3. The parent reads each labelled dump's Ir total. The value is forward minus no-op: the
   instructions of the forward alone, without the client requests' own ctypes round trip.

The client requests come from a five-function C shim (``callgrind.h``) compiled once with ``cc``
into a cache folder and loaded with ctypes. Missing valgrind, headers or compiler, a device other
than cpu, a pipeline that did not come from a config case, a callable that cannot be re-created in
the child, a child that fails or runs past its time:
each is a Metric with value None and the one-line reason, never 0.
"""
from __future__ import annotations

import functools
import hashlib
import inspect
import json
import os
import pickle
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Mapping

from pytest_s2st.measure.record import Metric
from pytest_s2st.progress import phase

METHOD = "callgrind"
METHODS = ("off", METHOD)
HOW = ("valgrind --tool=callgrind --instr-atstart=no: Ir between CALLGRIND_ZERO_STATS and CALLGRIND_DUMP_STATS_AT "
       "around stage.forward(x) on the first sample, minus the same around a no-op; child process under "
       "setarch -R (no ASLR), cpu, 1 torch thread, PYTHONHASHSEED=0, gc disabled during the count, after "
       "native warm-up")
TIMEOUT_S = 3600.0                   # the child's whole life under valgrind
LOG_TAIL_BYTES = 4096                # what is read back of the child's and valgrind's output
DUMP_MAX_BYTES = 256 * 2**20         # a callgrind dump larger than this is not read
RESULT_MAX_CHARS = 1_000_000         # the child's result: stage names
JOB_FILE, INPUT_FILE, RESULT_FILE, CHILD_LOG, VALGRIND_LOG, DUMP_PREFIX = (
    "job.json", "input.pkl", "result.json", "child.log", "valgrind.log", "callgrind.out")
MODEL_FILE = "model.pkl"             # the callable path: the benchmarked callable's pickle
NAME_MAX_CHARS = 120                 # a callable's name in a reason
CHILD_ERROR_PREFIX = "s2st-instructions: "
TRIGGER = "desc: Trigger: Client Request: "
HEADER_DIRS = (Path("/usr/include"), Path("/usr/local/include"))

SHIM_SOURCE = """\
#include <valgrind/callgrind.h>
void s2st_cg_start(void) { CALLGRIND_START_INSTRUMENTATION; }
void s2st_cg_stop(void) { CALLGRIND_STOP_INSTRUMENTATION; }
void s2st_cg_zero(void) { CALLGRIND_ZERO_STATS; }
void s2st_cg_dump(const char *label) { CALLGRIND_DUMP_STATS_AT(label); }
int s2st_cg_running(void) { return RUNNING_ON_VALGRIND; }
"""


class Unavailable(Exception):
    """The count cannot be made here; str() is the one-line reason."""


def label(stage_index: int, what: str) -> str:
    return f"s2st:{stage_index}:{what}"


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pytest-s2st"


def find_valgrind() -> str:
    path = shutil.which("valgrind")
    if path is None:
        raise Unavailable("valgrind is not on PATH (Debian/Ubuntu: apt-get install valgrind)")
    return path


def find_header() -> Path:
    for root in HEADER_DIRS:
        if (root / "valgrind" / "callgrind.h").is_file():
            return root / "valgrind" / "callgrind.h"
    raise Unavailable("valgrind/callgrind.h not found in " + ", ".join(map(str, HEADER_DIRS))
                      + " (Debian/Ubuntu ship it in the valgrind package)")


def build_shim(cache: Path | None = None) -> Path:
    """The client-request shim, compiled once per (source, header) into the cache folder."""
    header = find_header()
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise Unavailable("no C compiler (cc) to build the callgrind client-request shim")
    digest = hashlib.sha256(SHIM_SOURCE.encode() + header.read_bytes()
                            + (header.parent / "valgrind.h").read_bytes()).hexdigest()[:16]
    folders = [cache or cache_dir(), Path(tempfile.gettempdir()) / f"pytest-s2st-{os.getuid()}"]
    problems = []
    for folder in folders:
        target = folder / f"callgrind-shim-{digest}.so"
        if target.is_file():
            return target
        try:
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            with tempfile.TemporaryDirectory(dir=folder) as tmp:
                source = Path(tmp) / "shim.c"
                source.write_text(SHIM_SOURCE)
                built = Path(tmp) / "shim.so"
                proc = subprocess.run([compiler, "-O2", "-shared", "-fPIC", "-I", str(header.parent.parent),
                                       "-o", str(built), str(source)], capture_output=True, timeout=120)
                if proc.returncode != 0:
                    tail = proc.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
                    raise Unavailable(f"{compiler} could not build the callgrind shim: {tail[0][:300]}")
                os.replace(built, target)  # atomic: a concurrent build leaves one whole file
            return target
        except OSError as exc:
            problems.append(f"{folder}: {exc.strerror or exc}")
    raise Unavailable("cannot write the callgrind shim: " + "; ".join(problems))


def _tail(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, path.stat().st_size - LOG_TAIL_BYTES))
            return f.read(LOG_TAIL_BYTES).decode(errors="replace")
    except OSError:
        return ""


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    ours = [line[len(CHILD_ERROR_PREFIX):] for line in lines if line.startswith(CHILD_ERROR_PREFIX)]
    return (ours or lines or [""])[-1][:500]


def read_dumps(folder: Path) -> dict[str, int]:
    """{client-request label: Ir total} of every callgrind dump in the folder."""
    out: dict[str, int] = {}
    for path in sorted(folder.glob(DUMP_PREFIX + ".*")):
        if path.stat().st_size > DUMP_MAX_BYTES:
            raise Unavailable(f"{path}: callgrind dump over {DUMP_MAX_BYTES} bytes, not read")
        trigger, events, total = None, None, None
        with open(path, "rb") as f:
            for raw in f:
                line = raw.decode(errors="replace").rstrip("\n")
                if line.startswith(TRIGGER):
                    trigger = line[len(TRIGGER):].strip()
                elif line.startswith("events:"):
                    events = line.split(":", 1)[1].split()
                elif line.startswith("totals:") or (line.startswith("summary:") and total is None):
                    total = line.split(":", 1)[1].split()
        if trigger is None or total is None:
            continue
        if events is None or "Ir" not in events:
            raise Unavailable(f"{path}: no Ir event in the dump (events: {events})")
        try:
            out[trigger] = int(total[events.index("Ir")])
        except (IndexError, ValueError):
            raise Unavailable(f"{path}: unreadable Ir total {' '.join(total)[:80]!r}") from None
    return out


def no_aslr_prefix() -> list[str]:
    """``setarch <arch> -R``: addresses the same run to run, so that what hashes objects by address (sets
    and dicts of objects, caches keyed by id) takes the same path each time. Empty where unavailable."""
    setarch = shutil.which("setarch")
    if setarch is None:
        return []
    prefix = [setarch, platform.machine(), "-R"]
    try:
        ok = subprocess.run(prefix + ["true"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        ok = False
    return prefix if ok else []


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(PYTHONHASHSEED="0", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               PYTHONDONTWRITEBYTECODE="1")
    return env


def callable_name(model: Any) -> str:
    """How a reason names the benchmarked callable: ``module.qualname`` of a function or method
    (``test_x.test_y.<locals>.fn``), ``functools.partial(...)`` around its function's, else the object's class."""
    if isinstance(model, functools.partial):
        return f"functools.partial({callable_name(model.func)})"[:NAME_MAX_CHARS]
    qualname = getattr(model, "__qualname__", None)
    if isinstance(qualname, str) and (inspect.isroutine(model) or inspect.isclass(model)):
        module = getattr(model, "__module__", None)
    else:
        qualname, module = f"{type(model).__qualname__} object", type(model).__module__
    return (f"{module}.{qualname}" if isinstance(module, str) and module != "builtins" else qualname)[:NAME_MAX_CHARS]


def pickled_callable(model: Any) -> bytes:
    """The callable's pickle for the valgrind child (by reference: the child imports it by name), or
    Unavailable with the one-line reason naming it."""
    name = callable_name(model)
    try:
        return pickle.dumps(model, protocol=4)
    except Exception as exc:  # noqa: BLE001 -- PicklingError, AttributeError, TypeError: a lambda, a closure, ...
        if "<locals>" in name or "<lambda>" in name:  # pickle's own message only repeats the name
            raise Unavailable(f"{name} cannot be re-created in the valgrind child (not importable by name); "
                              "define it at module level") from None
        why = str(exc).splitlines()[0][:160] if str(exc) else ""
        raise Unavailable(f"{name} cannot be re-created in the valgrind child (pickle: {type(exc).__name__}: {why}); "
                          "define it at module level or make it picklable") from None


def count_pipeline(case: Mapping[str, Any] | None, first_input: Any, *, warmup: int = 2, seed: int = 1,
                   timeout_s: float = TIMEOUT_S, model: Any = None) -> dict[str, Metric]:
    """{stage name: instructions of its forward} for the case's pipeline on ``first_input`` (stage 1's
    prepared input). ``model``: the benchmarked callable (or pipeline object) when it is not the case's
    pipeline: the child re-creates it from its pickle instead of building the case. Raises Unavailable with
    the one-line reason when no count can be made."""
    valgrind = find_valgrind()
    shim = build_shim()
    model_bytes = pickled_callable(model) if model is not None else None
    with tempfile.TemporaryDirectory(prefix="s2st-instr-") as tmp:
        work = Path(tmp)
        try:
            with open(work / INPUT_FILE, "wb") as f:
                pickle.dump(first_input, f, protocol=4)
        except Exception as exc:
            raise Unavailable(f"the first input cannot be handed to the valgrind child (pickle: "
                              f"{type(exc).__name__}: {exc})"[:500]) from None
        job = {"case": dict(case) if model is None else None, "input": str(work / INPUT_FILE), "warmup": int(warmup),
               "seed": int(seed), "shim": str(shim), "result": str(work / RESULT_FILE), "model": None}
        if model_bytes is not None:
            (work / MODEL_FILE).write_bytes(model_bytes)
            job["model"], job["model_name"] = str(work / MODEL_FILE), callable_name(model)
            job["sys_path"] = [p for p in sys.path if isinstance(p, str)]  # the test's modules, as pytest saw them
        (work / JOB_FILE).write_text(json.dumps(job))
        cmd = no_aslr_prefix() + [valgrind, "--tool=callgrind", "--instr-atstart=no", "--dump-instr=no",
               "--dump-line=no", f"--callgrind-out-file={work / DUMP_PREFIX}", f"--log-file={work / VALGRIND_LOG}",
               sys.executable, "-m", "pytest_s2st.instr_child", str(work / JOB_FILE)]
        # minutes under valgrind: a line every 10 s; each counted stage leaves 3 dumps (prime, no-op, forward)
        with open(work / CHILD_LOG, "wb") as log, phase(
                "counting instructions under valgrind "
                f"({callable_name(model) if model is not None else (case or {}).get('case_id', 'case')})",
                unit="stage(s) counted",
                done=lambda: len(list(work.glob(DUMP_PREFIX + ".*"))) // 3, limit_s=timeout_s):
            try:
                proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                      env=child_env(), timeout=timeout_s)
            except subprocess.TimeoutExpired:
                raise Unavailable(f"the valgrind child ran past {timeout_s:g} s and was killed") from None
        if proc.returncode != 0:
            why = _last_line(_tail(work / CHILD_LOG)) or _last_line(_tail(work / VALGRIND_LOG)) or "no output"
            raise Unavailable(f"the valgrind child exited {proc.returncode}: {why}")
        try:
            with open(work / RESULT_FILE, encoding="utf-8") as f:
                result = json.loads(f.read(RESULT_MAX_CHARS))
        except (OSError, ValueError) as exc:
            raise Unavailable(f"the valgrind child left no result ({exc})") from None
        counts = read_dumps(work)
    out: dict[str, Metric] = {}
    for entry in result["stages"]:
        i, name = int(entry["index"]), str(entry["name"])
        forward, noop = counts.get(label(i, "forward")), counts.get(label(i, "noop"))
        if forward is None or noop is None:
            out[name] = Metric.missing(METHOD, f"no callgrind dump for stage {name!r}")
            continue
        details = {"forward_ir": forward, "toggle_ir": noop, "prime_ir": counts.get(label(i, "prime")),
                   "threads": result.get("threads"), "sample": 0, "how": HOW}
        out[name] = Metric(forward - noop, METHOD, details=details)
    return out


class InstructionPass:
    """The runner's instruction pass: one valgrind child per pipeline (every stage counted on the
    first sample), run on the first stage's call and read by name for the others. ``model``: the
    benchmarked callable when it is not the case's pipeline (``s2st_benchmark(fn, inputs)``): the child
    re-creates it from its pickle."""

    def __init__(self, method: str, case: Mapping[str, Any] | None, device: str, warmup: int = 2, seed: int = 1,
                 timeout_s: float = TIMEOUT_S, model: Any = None):
        self.method, self.case, self.device, self.model = method, case, device, model
        self.warmup, self.seed, self.timeout_s = warmup, seed, timeout_s
        self._results: dict[str, Metric] | None = None
        self._reason: str | None = None

    @property
    def enabled(self) -> bool:
        return self.method != "off"

    def measure(self, stage: Any, stage_inputs: Any) -> Metric | None:
        """The stage's count (None when off). The first call must be the pipeline's first stage: its
        first input is what the child feeds the pipeline."""
        if not self.enabled:
            return None
        if self._results is None and self._reason is None:
            self._run(stage_inputs[0])
        if self._reason is not None:
            return Metric.missing(METHOD, self._reason)
        return self._results.get(stage.name) or Metric.missing(
            METHOD, f"stage {stage.name!r} is not in the pipeline the valgrind child built")

    def _run(self, first_input: Any) -> None:
        if self.method != METHOD:
            self._reason = f"--s2st-instructions={self.method}: unknown method, expected one of {', '.join(METHODS)}"
        elif self.device != "cpu":
            self._reason = f"instructions are counted on cpu only (device is {self.device})"
        elif self.case is None and self.model is None:
            self._reason = ("the valgrind child rebuilds the pipeline from its config: this s2st_benchmark call "
                            "has no s2st_case")
        else:
            try:
                self._results = count_pipeline(self.case, first_input, warmup=self.warmup, seed=self.seed,
                                               timeout_s=self.timeout_s, model=self.model)
            except Unavailable as exc:
                self._reason = str(exc)
