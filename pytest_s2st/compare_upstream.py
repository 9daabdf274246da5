"""Whole-process comparison: one pytest-s2st session against fairseq's get_metrics.py, one per config.

Both sides run as subprocesses on the same staged configs, samples (general.dataset_size), repeat
and warm-up (upstream hard-codes warm_up(repeat=2) on sample 0, then gather_all_metrics(repeat=1))
and thread count (OMP_NUM_THREADS / MKL_NUM_THREADS in both environments; ours also --s2st-threads).
A wall is perf_counter from spawn to exit: interpreter start and imports included, as a user waits.
FLOPs come from upstream's printed lines and from our --benchmark-json; upstream's flops are
our FLOPs pass's dispatch counter behind its PAPI calls (see pipelines/fairseq_upstream.py), so both
sides use the same counter and should agree to the rounding upstream applies (round(mean)).
Results are keyed by our case id (``config_key``); ``derive_config`` copies a config onto another
number of samples (the full-size benchmark runs dataset_size 1); ``startup_s`` (spawn to the first
measured forward) is reported apart from the rest of each wall.

    python -m pytest_s2st.compare_upstream --rounds 3 [--tests benchmarks/test_inference.py]

pytest-free: benchmarks/test_vs_upstream.py drives it.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from .errors import S2STError
from .tiny.fairseq_tiny import default_configs

UPSTREAM_MODULE = "pytest_s2st.pipelines.fairseq_upstream"
UPSTREAM_WARMUP = 2  # get_metrics.cli_main: model.warm_up(sample=dataset[0], repeat=2)
UPSTREAM_REPEAT = 1  # get_metrics.cli_main: model.gather_all_metrics(dataset, repeat=1)

_FINAL = re.compile(r"^run_time = (\S+)sec \tmemory = (\S+)MiB \tflops = (\S+)\s*$", re.M)
_STAGE_FLOPS = re.compile(r"^metric_type = count_flops\s+(.*)$", re.M)
_STAGE_RUNTIME = re.compile(r"^metric_type = benchmark_run_time\s+(.*)$", re.M)
_STAGE_VALUE = re.compile(r"(\w+)_metrics = (\S+)")
_SAMPLES = re.compile(r"Benchmarked run time for \d+/(\d+) samples")
_DURATION = re.compile(r"^\s*([\d.]+)s (setup|call|teardown)\s+\S+::\S+\[(.+?)\]\s*$", re.M)


@dataclass
class ProcessRun:
    """One subprocess: wall (spawn to exit), CPU seconds of the child, exit status, output; marks_s: seconds
    from spawn to the first output line matching each pattern asked for (None: never printed)."""

    wall_s: float
    cpu_s: float
    returncode: int
    output: str = field(repr=False)
    marks_s: dict[str, float | None] = field(default_factory=dict)


@dataclass
class SideResult:
    """One side of one round. flops: {case id: {"total": x, <stage>: y, ...}}; per_type_wall_s
    only for upstream (one process per config); phases_s: ours, pytest --durations per case."""

    wall_s: float
    cpu_s: float
    flops: dict[str, dict[str, float]]
    samples: dict[str, int]
    per_type_wall_s: dict[str, float] = field(default_factory=dict)
    phases_s: dict[str, dict[str, float]] = field(default_factory=dict)
    runtime_s: dict[str, dict[str, float]] = field(default_factory=dict)  # per-sample runtime, as flops
    # spawn until the first measured forward (interpreter, imports, model loading), summed over processes;
    # None where a process did not say when its measuring began
    startup_s: float | None = None


def thread_env(threads: int) -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    env.pop("PYTEST_ADDOPTS", None)  # the outer session's options are not ours to pass on
    # Python's default: bytecode cached. With PYTHONDONTWRITEBYTECODE=1 (set on some CI images) pytest re-rewrites
    # the asserts of every module of a pytest11 plugin's distribution on each run (hydra, hypothesis, anyio here:
    # 1-2 s a session) while upstream's imports use the pyc files pip wrote; a default install pays neither.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    # each printed line reaches the pipe when printed, so run_process can stamp when it came (a few lines a run)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_process(cmd: list[str], *, cwd: Path, env: dict[str, str],
                marks: dict[str, re.Pattern] | None = None) -> ProcessRun:
    """Run cmd to its end, output read line by line as it comes; ``marks``: {name: pattern} stamped at the
    first line that matches (seconds since spawn)."""
    marks = marks or {}
    stamped: dict[str, float | None] = dict.fromkeys(marks)
    lines: list[str] = []
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    with subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          errors="replace") as proc:
        for line in proc.stdout:
            now = time.perf_counter() - start
            lines.append(line)
            for name, pattern in marks.items():
                if stamped[name] is None and pattern.search(line):
                    stamped[name] = now
        returncode = proc.wait()
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return ProcessRun(wall, cpu, returncode, "".join(lines), stamped)


def config_general(config: Path) -> dict:
    import yaml  # lazy: heavy

    return (yaml.safe_load(config.read_text()) or {}).get("general") or {}


def config_dataset_size(config: Path) -> int | None:
    return config_general(config).get("dataset_size")


def config_key(config: Path) -> str:
    """The case id our session gives the config (config.load_config: model_type-name, name = general.name or
    the file stem): both sides' results are keyed by it, so two configs of one model type (a TTS transformer
    and a FastSpeech2) stay apart."""
    general = config_general(config)
    name = general.get("name")
    return f"{general.get('model_type')}-{name if name not in (None, '') else config.stem}"


def derive_config(config: Path, out_dir: Path, *, dataset_size: int, sample_keys: dict | None = None,
                  samples: list[dict] | None = None) -> Path:
    """config's YAML written into out_dir under the same file name, on the same models and data: its relative
    paths made absolute as our loader resolves them (config.PATH_KEYS, the model type's, the checkpoint path;
    not config_yaml, which fairseq reads from `data`), general.dataset_size set. sample_keys: the first
    dataset_size samples of its npy dataset are copied beside it with these top-level and net_input keys added
    (``{"target_lengths": None, "net_input": {"prev_output_tokens": None}}``: what upstream's core.py reads of
    a FastSpeech2 sample and its own npy format lacks). samples: written as its dataset instead of the config's own."""
    import yaml  # lazy: heavy

    from .config import resolve_paths  # lazy: heavy

    config = Path(config).resolve()
    doc = yaml.safe_load(config.read_text()) or {}
    model_type = (doc.get("general") or {}).get("model_type", "")
    doc = {name: resolve_paths(section, config.parent, model_type) if isinstance(section, dict) else section
           for name, section in doc.items()}
    doc["general"]["dataset_size"] = dataset_size
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if sample_keys or samples is not None:
        from .dataset_make import save_npy_dataset  # lazy: heavy
        from .datasets import load_npy_dataset  # lazy: heavy

        if samples is None:
            samples = load_npy_dataset(doc["general"]["dataset_path"], size=dataset_size)
        extra = dict(sample_keys or {})
        net_extra = extra.pop("net_input", {})
        samples = [{**s, **extra, "net_input": {**s["net_input"], **net_extra}} for s in samples]
        doc["general"]["dataset_path"] = str(save_npy_dataset(samples, out_dir / f"{config.stem}.npy",
                                                              torch_tensors=True))
    path = out_dir / config.name
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def check_configs(configs: list[Path], dataset_size: int) -> None:
    """Upstream takes dataset_size only from the config: ours must use the same number."""
    for config in configs:
        if not config.is_file():
            raise S2STError(f"{config}: no such config")
        size = config_dataset_size(config)
        if size != dataset_size:
            raise S2STError(f"{config}: general.dataset_size is {size!r}, the comparison runs {dataset_size} "
                            "samples (upstream reads only the config)")


# ---------------------------------------------------------------- upstream

def _stage_values(line: str) -> dict[str, float]:
    # S2UT without a vocoder prints "vocoder_metrics = 0", a placeholder (compute_metrics' default), not a stage
    return {name: float(value) for name, value in _STAGE_VALUE.findall(line)
            if not (name == "vocoder" and value == "0")}


def parse_upstream(output: str) -> tuple[dict[str, float], int | None]:
    """({"total": flops, <stage>: flops ...}, samples) from get_metrics.py's printed lines."""
    finals = _FINAL.findall(output)
    if not finals:
        raise ValueError("upstream printed no 'run_time = ... flops = ...' line")
    flops: dict[str, float] = {"total": float(finals[-1][2])}
    stage_line = _STAGE_FLOPS.findall(output)
    if stage_line:  # cascades print each stage's mean
        flops.update(_stage_values(stage_line[-1]))
    samples = _SAMPLES.search(output)
    return flops, int(samples.group(1)) if samples else None


def parse_upstream_runtime(output: str) -> dict[str, float]:
    """{"total": run_time, <stage>: seconds ...}: upstream's runtime per sample (its printed mean)."""
    finals = _FINAL.findall(output)
    if not finals:
        raise ValueError("upstream printed no 'run_time = ... flops = ...' line")
    out = {"total": float(finals[-1][0])}
    stage_line = _STAGE_RUNTIME.findall(output)
    if stage_line:
        out.update(_stage_values(stage_line[-1]))
    return out


# get_metrics.cli_main prints this once the model is built, before loading the dataset and measuring
UPSTREAM_MEASURING = re.compile(r"^Evaluating on dataset - ")


def run_upstream_one(config: Path, *, threads: int,
                     python: str = sys.executable) -> tuple[ProcessRun, dict[str, float], int | None]:
    # upstream resolves the config's relative paths against the current directory
    run = run_process([python, "-m", UPSTREAM_MODULE, "", "--config", config.name], cwd=config.parent,
                      env=thread_env(threads), marks={"measuring": UPSTREAM_MEASURING})
    if run.returncode != 0:
        raise RuntimeError(f"upstream get_metrics.py failed on {config} (exit {run.returncode}):\n{run.output[-3000:]}")
    flops, samples = parse_upstream(run.output)
    return run, flops, samples


def run_upstream(configs: list[Path], *, threads: int, python: str = sys.executable) -> SideResult:
    """get_metrics.py once per config, one after the other, as one side."""
    sides = []
    for config in configs:
        kind = config_key(config)  # our JSON's case id
        run, flops, samples = run_upstream_one(config, threads=threads, python=python)
        sides.append(SideResult(run.wall_s, run.cpu_s, {kind: flops}, {} if samples is None else {kind: samples},
                                per_type_wall_s={kind: run.wall_s},
                                runtime_s={kind: parse_upstream_runtime(run.output)},
                                startup_s=run.marks_s.get("measuring")))
    return combine(sides)


def combine(sides: list[SideResult]) -> SideResult:
    """Several runs of one side (one process per config, run apart) as one: walls, CPU and startups added
    (startup None when any is), per-config entries merged."""
    out = SideResult(0.0, 0.0, {}, {}, startup_s=0.0)
    for side in sides:
        out.wall_s += side.wall_s
        out.cpu_s += side.cpu_s
        out.startup_s = None if side.startup_s is None or out.startup_s is None else out.startup_s + side.startup_s
        for mine, theirs in ((out.flops, side.flops), (out.samples, side.samples),
                             (out.per_type_wall_s, side.per_type_wall_s), (out.phases_s, side.phases_s),
                             (out.runtime_s, side.runtime_s)):
            mine.update(theirs)
    return out


# ---------------------------------------------------------------- ours

def parse_ours(report: dict, metric: str = "flops") -> tuple[dict[str, dict[str, float]], dict[str, int]]:
    """({case id: {"total": value, <stage>: value ...}}, {case id: samples}) of one metric."""
    values: dict[str, dict[str, float]] = {}
    samples: dict[str, int] = {}
    for bench in report["benchmarks"]:
        s2st = bench["extra_info"]["s2st"]
        kind = s2st["case"]
        entry = {"total": s2st["metrics"][metric]["value"]}
        entry.update((stage["name"], stage["metrics"][metric]["value"]) for stage in s2st.get("stages") or [])
        values[kind] = entry
        samples[kind] = s2st["samples"]
    return values, samples


def parse_durations(output: str) -> dict[str, dict[str, float]]:
    """pytest --durations=0 lines -> {case id: {"setup": s, "call": s, "teardown": s}}."""
    phases: dict[str, dict[str, float]] = {}
    for seconds, phase, case in _DURATION.findall(output):
        phases.setdefault(case, {})[phase] = float(seconds)
    return phases


def run_ours(configs: list[Path], *, tests: Path, dataset_size: int, threads: int,
             python: str = sys.executable, protocol: str = "upstream") -> SideResult:
    with tempfile.TemporaryDirectory(prefix="s2st-vs-upstream-") as tmp:
        report = Path(tmp) / "ours.json"
        cmd = [python, "-m", "pytest", str(tests), "-q", "-p", "no:cacheprovider",
               "--s2st-dataset-size", str(dataset_size), "--s2st-repeat", str(UPSTREAM_REPEAT),
               "--s2st-warmup", str(UPSTREAM_WARMUP), "--s2st-threads", str(threads),
               "--s2st-runtime-protocol", protocol,
               "--benchmark-json", str(report), "--durations=0", "--durations-min=0"]
        for config in configs:
            cmd += ["--s2st-config", str(config)]
        run = run_process(cmd, cwd=Path.cwd(), env=thread_env(threads))
        if run.returncode != 0:
            raise RuntimeError(f"pytest-s2st session failed (exit {run.returncode}):\n{run.output[-3000:]}")
        saved = json.loads(report.read_text())
        flops, samples = parse_ours(saved)
        runtime, _ = parse_ours(saved, "runtime_s")
    phases = parse_durations(run.output)
    return SideResult(run.wall_s, run.cpu_s, flops, samples, phases_s=phases, runtime_s=runtime,
                      startup_s=ours_startup(run.wall_s, phases))


def ours_startup(wall_s: float, phases: dict[str, dict[str, float]]) -> float | None:
    """Our session's wall outside its cases' call phases (where every measuring pass runs): interpreter, imports,
    collection, each case's setup (model loading), teardown and the report; None without the durations."""
    calls = [p["call"] for p in phases.values() if "call" in p]
    return wall_s - sum(calls) if calls else None


# ---------------------------------------------------------------- comparison

def compare_flops(ours: dict[str, dict[str, float]], theirs: dict[str, dict[str, float]]) -> dict[str, dict]:
    """Per type: equal when every number upstream printed matches ours to within upstream's
    rounding (it prints round(mean)); a single-stage type compares its total only."""
    out: dict[str, dict] = {}
    for kind, their in theirs.items():
        our = ours.get(kind, {})
        diffs = {}
        for name, value in their.items():
            mine = our.get(name)
            if mine is None or abs(mine - value) > 0.5:
                diffs[name] = {"ours": mine, "theirs": value}
        out[kind] = {"equal": not diffs and kind in ours, "ours": our, "theirs": their, "differences": diffs}
    return out


def compare_runtime(ours_runs: list[SideResult], their_runs: list[SideResult]) -> dict[str, dict]:
    """Per type and stage: the median over rounds of each side's runtime per sample and their ratio
    (ours / upstream): the per-sample speed, apart from the whole-process walls (imports included)."""
    out: dict[str, dict] = {}
    for kind, their in their_runs[-1].runtime_s.items():
        entry = {}
        for name in their:
            theirs = [r.runtime_s.get(kind, {}).get(name) for r in their_runs]
            ours = [r.runtime_s.get(kind, {}).get(name) for r in ours_runs]
            if any(v is None for v in theirs + ours):
                continue
            o, t = statistics.median(ours), statistics.median(theirs)
            entry[name] = {"ours_s": o, "upstream_s": t, "ratio": o / t if t > 0 else None,
                           "ours_rounds_s": ours, "upstream_rounds_s": theirs}
        out[kind] = entry
    return out


def summarize(ours_runs: list[SideResult], their_runs: list[SideResult], *, configs: list[Path],
              dataset_size: int, threads: int, protocol: str = "upstream") -> dict:
    """Medians over rounds, the ratio ours/upstream, FLOPs and sample-count equality (last round)."""
    ours_wall = statistics.median(r.wall_s for r in ours_runs)
    their_wall = statistics.median(r.wall_s for r in their_runs)
    flops = compare_flops(ours_runs[-1].flops, their_runs[-1].flops)
    ours_samples, their_samples = ours_runs[-1].samples, their_runs[-1].samples
    return {
        "method": "perf_counter from subprocess spawn to exit (imports included); rounds alternate "
                  f"ours/upstream; medians; threads={threads} on both sides; bytecode cache on (Python's default)",
        "configs": [str(c) for c in configs],
        "dataset_size": dataset_size, "repeat": UPSTREAM_REPEAT, "warmup": UPSTREAM_WARMUP, "threads": threads,
        "rounds": len(ours_runs),
        "ours_wall_s": ours_wall,
        "upstream_wall_s": their_wall,  # the sum of its per-config process walls, median over rounds
        "ratio": ours_wall / their_wall,
        "ours_cpu_s": statistics.median(r.cpu_s for r in ours_runs),
        "upstream_cpu_s": statistics.median(r.cpu_s for r in their_runs),
        # spawn to the first measured forward (imports, model loading) apart from the rest: the part of the
        # ratio that one process per config pays again and one session pays once
        "ours_startup_s": _median_or_none([r.startup_s for r in ours_runs]),
        "upstream_startup_s": _median_or_none([r.startup_s for r in their_runs]),
        "ours_walls_s": [r.wall_s for r in ours_runs],
        "upstream_walls_s": [r.wall_s for r in their_runs],
        "upstream_per_type_wall_s": {k: statistics.median(r.per_type_wall_s[k] for r in their_runs)
                                     for k in their_runs[-1].per_type_wall_s},
        "ours_phases_s": ours_runs[-1].phases_s,
        "samples": {"ours": ours_samples, "upstream": their_samples,
                    "equal": bool(their_samples) and all(ours_samples.get(k) == v for k, v in their_samples.items())},
        "flops": flops,
        "flops_equal": all(v["equal"] for v in flops.values()),
        "runtime_protocol": protocol,  # ours; upstream's is its own
        "runtime_per_sample": compare_runtime(ours_runs, their_runs),
    }


def _median_or_none(values: list[float | None]) -> float | None:
    return None if not values or any(v is None for v in values) else statistics.median(values)


def compare(configs: list[Path], *, tests: Path, rounds: int = 3, dataset_size: int = 2, threads: int = 1,
            python: str = sys.executable, log=None, protocol: str = "upstream") -> dict:
    """Alternate ours, theirs, ours, theirs... ``rounds`` times, then summarize()."""
    configs = [Path(c).resolve() for c in configs]
    check_configs(configs, dataset_size)
    ours_runs: list[SideResult] = []
    their_runs: list[SideResult] = []
    for i in range(rounds):
        ours_runs.append(run_ours(configs, tests=Path(tests).resolve(), dataset_size=dataset_size, threads=threads,
                                  python=python, protocol=protocol))
        their_runs.append(run_upstream(configs, threads=threads, python=python))
        if log:
            log(f"round {i + 1}/{rounds}: ours {ours_runs[-1].wall_s:.2f} s, upstream {their_runs[-1].wall_s:.2f} s")
    return summarize(ours_runs, their_runs, configs=configs, dataset_size=dataset_size, threads=threads,
                     protocol=protocol)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tests", default="benchmarks/test_inference.py", help="our benchmark file")
    parser.add_argument("--dataset-size", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--config", action="append", help="default: the seven staged tiny fairseq configs")
    parser.add_argument("--protocol", choices=("upstream", "warm"), default="upstream",
                        help="our runtime protocol (--s2st-runtime-protocol); upstream times as get_metrics.py")
    args = parser.parse_args(argv)
    if args.config:
        configs = [Path(c) for c in args.config]
    else:
        configs = default_configs()
    result = compare(configs, tests=Path(args.tests), rounds=args.rounds, dataset_size=args.dataset_size,
                     threads=args.threads, log=lambda m: print(m, file=sys.stderr, flush=True),
                     protocol=args.protocol)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
