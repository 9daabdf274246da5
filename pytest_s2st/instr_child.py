"""The valgrind child of the instruction pass (see instructions.py): ``python -m
pytest_s2st.instr_child JOB.json`` under ``valgrind --tool=callgrind --instr-atstart=no``.

Builds the case's pipeline on cpu (or re-creates the benchmarked callable from its pickle), and for
every stage: native warm-up, then two counted calls between client requests (a no-op, then the
forward), each in its own labelled dump. Writes the stage names to the job's result file. Any
failure is one line ``s2st-instructions: ...`` and exit 2.
"""
from __future__ import annotations

import ctypes
import gc
import json
import pickle
import sys
from pathlib import Path

from pytest_s2st.measure.determinism import seed_everything, set_threads
from pytest_s2st.measure.instructions import CHILD_ERROR_PREFIX, label
from pytest_s2st.pipelines.base import build_pipeline
from pytest_s2st.pipelines.callable import from_function, is_pipeline

JOB_MAX_BYTES = 16 * 2**20


class _Noop:
    def forward(self, x):  # the same call shape as stage.forward: a bound method on one input
        return None


def _shim(path: str):
    lib = ctypes.CDLL(path)
    lib.s2st_cg_dump.argtypes = [ctypes.c_char_p]
    for name in ("s2st_cg_start", "s2st_cg_stop", "s2st_cg_zero", "s2st_cg_dump"):
        getattr(lib, name).restype = None
    return lib


def _recreate(job: dict):
    """The callable path: the benchmarked callable from its pickle (by reference: imported by name, from the
    test's sys.path), as a one-stage pipeline unless it already is a pipeline."""
    sys.path[:0] = [p for p in job.get("sys_path") or [] if p not in sys.path]
    try:
        with open(job["model"], "rb") as f:  # written by our parent into its private temp folder
            model = pickle.load(f)
    except Exception as exc:  # noqa: BLE001 -- one line naming the callable
        raise RuntimeError(f"{job.get('model_name')} cannot be re-created in the valgrind child ({type(exc).__name__}: "
                           f"{exc}); define it at module level of an importable module") from None
    return model if is_pipeline(model) else from_function(model, "the valgrind child")


def run(job: dict) -> dict:
    from pytest_s2st.cases import Case  # lazy: heavy

    lib = _shim(job["shim"])
    if not lib.s2st_cg_running():
        raise RuntimeError("not running under valgrind (run by pytest_s2st.measure.instructions)")
    if job.get("model"):
        pipeline = _recreate(job)
    else:
        case = Case.from_dict(job["case"])
        pipeline = build_pipeline(case.model_type, case.config.stages, device="cpu", config_path=case.config.path)
    threads = set_threads(1)
    with open(job["input"], "rb") as f:  # written by our parent into its private temp folder
        x = pickle.load(f)
    seed, warmup, noop = int(job["seed"]), max(1, int(job["warmup"])), _Noop()
    stages = []
    for i, stage in enumerate(pipeline.stages):
        for _ in range(warmup):
            seed_everything(seed)
            stage.forward(x)
        seed_everything(seed)
        gc.collect()
        gc.disable()
        prime, empty, forward = (label(i, what).encode() for what in ("prime", "noop", "forward"))
        lib.s2st_cg_start()
        for name in (prime, empty):  # "prime": first calls through ctypes cost more; not read
            lib.s2st_cg_zero()
            noop.forward(x)
            lib.s2st_cg_dump(name)
        lib.s2st_cg_zero()
        out = stage.forward(x)
        lib.s2st_cg_dump(forward)
        lib.s2st_cg_stop()
        gc.enable()
        stages.append({"index": i, "name": stage.name})
        x = stage.to_next_input(out)
    return {"stages": stages, "threads": threads}


def main(argv: list[str]) -> int:
    try:
        path = Path(argv[0])
        if path.stat().st_size > JOB_MAX_BYTES:
            raise ValueError(f"{path}: job over {JOB_MAX_BYTES} bytes")
        job = json.loads(path.read_text())
        result = run(job)
        Path(job["result"]).write_text(json.dumps(result))
    except BaseException as exc:  # one line for the parent's reason, never a traceback
        text = str(exc).replace("\n", " ")[:400]
        print(f"{CHILD_ERROR_PREFIX}{type(exc).__name__}: {text}", file=sys.stderr, flush=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
