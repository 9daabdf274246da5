"""The memory pass of one case in a fresh process (--s2st-isolate), so a case's peak RSS does not depend
on what ran before it in the session (pytest-free).

Peak RSS is a property of the process: in one session a case measured after a Griffin-Lim TTS carries
librosa's and numba's pages, after another model that model's allocator arenas. Upstream runs one process
per config. Here the parent writes a job (the resolved case, ``Case.to_dict``, and the first stage's
prepared inputs, pickled into a private temp folder); ``python -m pytest_s2st.isolated JOB`` builds
the case's pipeline on cpu, and per stage warms it up on the first input and runs the memory pass over
every input with the same probe as in-process (MemoryProbe), each stage's outputs feeding the next. The
parent reads one summary per stage. A failure or a child past its time is a Metric with value None and a
one-line reason, never 0. Imports of the child (torch, the model's packages) are in its numbers, as in
upstream's.
"""
from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Sequence

from pytest_s2st.measure.determinism import seed_everything, set_threads
from pytest_s2st.measure.memory import MemoryProbe, current_rss_mib, resolve_memory_method, rss_rise
from pytest_s2st.measure.record import Metric, mib_summary
from pytest_s2st.pipelines.base import build_pipeline
from pytest_s2st.pipelines.callable import from_function, is_pipeline

TIMEOUT_S = 3600.0
RESULT_MAX_BYTES = 1_000_000
LOG_TAIL_CHARS = 2000
NAMES = ("rss_rise_mib", "peak_rss_mib", "peak_delta_mib")
NOTE = "fresh process per case (--s2st-isolate): this case's imports and model only"


def _missing(method: str, reason: str, stages: int) -> list[dict[str, Metric]]:
    return [{n: Metric.missing(method, reason) for n in NAMES} for _ in range(stages)]


def _pickled(what: str, value: Any) -> tuple[bytes | None, str | None]:
    """(pickle bytes, None), or (None, a one-line reason naming what could not be pickled)."""
    try:
        return pickle.dumps(value), None
    # PicklingError, TypeError, AttributeError: a closure, a lambda, a generator
    except Exception as exc:  # noqa: BLE001
        text = str(exc).splitlines()[0][:200] if str(exc) else ""
        return None, f"--s2st-isolate: {what} cannot be pickled for the fresh process ({type(exc).__name__}: {text})"


def isolated_memory(case: dict | None, inputs: Sequence[Any], *, method: str, warmup: int, threads: int,
                    seed: int, stages: int, device: str, model: Any = None) -> list[dict[str, Metric]]:
    """Per stage {"rss_rise_mib", "peak_rss_mib", "peak_delta_mib"} measured in a child process. ``model``: the
    callable (or pipeline) the test benchmarks when it is not the case's own pipeline: the child re-creates that
    one from its pickle (a module-level function or a picklable object), not the case's model; one that cannot be
    pickled is a missing metric saying so."""
    if case is None and model is None:
        return _missing(method, "--s2st-isolate needs a case from a config or a picklable callable (the child "
                                "re-creates it)", stages)
    if device != "cpu":
        return _missing(method, f"--s2st-isolate measures on cpu only, this case runs on {device}", stages)
    model_bytes = None
    if model is not None:
        name = getattr(model, "__qualname__", None) or type(model).__name__
        model_bytes, why = _pickled(f"the benchmarked callable {name!r} (not the case's pipeline)", model)
        if why:
            return _missing(method, f"{why}; define it at module level, or benchmark s2st_pipeline", stages)
    inputs_bytes, why = _pickled("the inputs", list(inputs))
    if why:
        return _missing(method, why, stages)
    with tempfile.TemporaryDirectory(prefix="s2st-isolate-") as tmp:
        job = {"case": case if model is None else None, "inputs": str(Path(tmp) / "inputs.pkl"),
               "result": str(Path(tmp) / "result.json"), "method": method, "warmup": warmup, "threads": threads,
               "seed": seed, "model": None, "sys_path": [p for p in sys.path if isinstance(p, str)]}
        Path(job["inputs"]).write_bytes(inputs_bytes)
        if model_bytes is not None:
            job["model"] = str(Path(tmp) / "model.pkl")
            Path(job["model"]).write_bytes(model_bytes)
        (Path(tmp) / "job.json").write_text(json.dumps(job))
        try:
            proc = subprocess.run([sys.executable, "-m", "pytest_s2st.isolated", str(Path(tmp) / "job.json")],
                                  capture_output=True, text=True, timeout=TIMEOUT_S,
                                  env={**os.environ, "PYTHONHASHSEED": "0"})
        except subprocess.TimeoutExpired:
            return _missing(method, f"isolated memory pass ran past {TIMEOUT_S:g} s", stages)
        result = Path(job["result"])
        if proc.returncode != 0 or not result.is_file() or result.stat().st_size > RESULT_MAX_BYTES:
            tail = (proc.stderr or proc.stdout or "").strip().splitlines()
            why = tail[-1][:LOG_TAIL_CHARS] if tail else f"exit {proc.returncode}"
            return _missing(method, f"isolated memory pass failed: {why}", stages)
        data = json.loads(result.read_text())
    out = []
    for entry in data["stages"]:
        metrics = {n: Metric.from_dict(entry[n]) for n in NAMES}
        for m in metrics.values():
            if m.value is not None:
                m.details["isolated"] = NOTE
        out.append(metrics)
    return out


def run(job: dict) -> dict:
    start = current_rss_mib()  # the fresh process before the case's model is built: its RSS rise starts here
    from pytest_s2st.cases import Case  # lazy: heavy

    set_threads(int(job["threads"]))
    seed_everything(int(job["seed"]))
    sys.path[:0] = [p for p in job.get("sys_path") or [] if p not in sys.path]  # the test's modules, as pytest saw them
    with open(job["inputs"], "rb") as f:  # written by our parent into its private temp folder
        xs = pickle.load(f)
    if job.get("model"):
        try:
            with open(job["model"], "rb") as f:  # likewise ours
                model = pickle.load(f)
        except Exception as exc:  # noqa: BLE001
            raise RuntimeError("the benchmarked callable cannot be re-created in the fresh process "
                               f"({type(exc).__name__}: {exc})") from None
        pipeline = model if is_pipeline(model) else from_function(model, "--s2st-isolate")
    else:
        case = Case.from_dict(job["case"])
        pipeline = build_pipeline(case.model_type, case.config.stages, device="cpu", config_path=case.config.path)
    method, fallback = resolve_memory_method(job["method"])
    probe = MemoryProbe(method, fallback)
    stages = []
    try:
        for s, stage in enumerate(pipeline.stages):
            for _ in range(int(job["warmup"])):
                stage.forward(xs[0])
            per_sample, outputs = [], []
            for x in xs:
                out, mem = probe.measure(stage.forward, x)
                per_sample.append(mem)
                outputs.append(out)
            peak = mib_summary(per_sample, "peak_rss_mib")
            rise = rss_rise(peak, start, "the fresh process before the case's model was built")
            stages.append({"rss_rise_mib": rise.to_dict(), "peak_rss_mib": peak.to_dict(),
                           "peak_delta_mib": mib_summary(per_sample, "peak_delta_mib").to_dict()})
            if s + 1 < len(pipeline.stages):
                xs = [stage.to_next_input(o) for o in outputs]
    finally:
        probe.close()
    return {"stages": stages}


def main(argv: list[str]) -> int:
    try:
        job = json.loads(Path(argv[0]).read_text())
        Path(job["result"]).write_text(json.dumps(run(job)))
    except Exception as exc:  # noqa: BLE001 -- one line for the parent
        print(f"s2st-isolate: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
