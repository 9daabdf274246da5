"""The only places pytest-s2st touches pytest-benchmark internals, each named and checked.

pytest-benchmark has no public API for (a) the timer its fixture uses, which our per-stage clocks
must share so the stage times and its own table agree, and (b) the saved runs that
``--benchmark-compare`` loaded, which our compare table and the quality gate's baseline read.
If a release renames them, these functions raise one clear line instead of a silent
no-comparison; tests/test_benchmark_compat.py fails loudly on such a release.
"""
from __future__ import annotations

import json
import os
import shlex
from importlib.metadata import version
from types import SimpleNamespace
from typing import Any, Callable, Mapping, Sequence

from .errors import S2STError


def _changed(what: str) -> S2STError:
    try:
        release = version("pytest-benchmark")
    except Exception:  # noqa: BLE001 -- only for the message
        release = "?"
    return S2STError(f"pytest-benchmark {release}: {what} is gone; pytest-s2st needs it "
                     "(see pytest_s2st/benchmark_compat.py)")


def fixture_timer(benchmark: Any) -> Callable[[], float]:
    """The clock of the ``benchmark`` fixture (BenchmarkFixture._timer)."""
    timer = getattr(benchmark, "_timer", None)
    if not callable(timer):
        raise _changed("BenchmarkFixture._timer")
    return timer


def save_case_ids(benchmark: Any) -> None:
    """The saved ``params`` (BenchmarkFixture.params, pytest's callspec.params) name the case by its id: the Case
    object itself would be saved as a long ``UNSERIALIZABLE[...]`` string by pytest-benchmark's JSON encoder."""
    params = getattr(benchmark, "params", None)
    if isinstance(params, dict):
        benchmark.params = {k: getattr(v, "case_id", v) for k, v in params.items()}


def timer_name(timer: Callable[[], float]) -> str:
    return f"{getattr(timer, '__module__', '')}.{getattr(timer, '__name__', repr(timer))}".lstrip(".")


def compared_mapping(config: Any) -> Mapping[str, Mapping[str, Any]]:
    """{saved file: {fullname: saved benchmark}} that --benchmark-compare loaded ({} without it).

    BenchmarkSession (config._benchmarksession) fills ``compared_mapping`` in handle_loading.
    """
    session = getattr(config, "_benchmarksession", None)
    if session is None:
        if config.pluginmanager.hasplugin("benchmark"):
            raise _changed("config._benchmarksession")
        return {}
    if not hasattr(session, "compared_mapping"):
        raise _changed("BenchmarkSession.compared_mapping")
    return session.compared_mapping or {}


def _session(config: Any) -> Any:
    session = getattr(config, "_benchmarksession", None)
    if session is None:
        raise _changed("config._benchmarksession")
    return session


def enable_under_xdist(config: Any, worker: bool) -> None:
    """Undo pytest-benchmark's "disabled because xdist plugin is active" (BenchmarkSession.disabled,
    .xdist_warning, .xdist_benchmark_found): pytest-s2st times each case on one worker and merges the
    rows on the controller. An explicit --benchmark-disable stays. Workers save nothing and judge no
    --benchmark-compare-fail themselves (.save, .autosave, .json, .compare_fail): the controller does
    both once, over every worker's rows."""
    session = _session(config)
    for attr in ("disabled", "xdist_warning", "xdist_benchmark_found", "save", "autosave", "json", "compare_fail"):
        if not hasattr(session, attr):
            raise _changed(f"BenchmarkSession.{attr}")
    session.xdist_warning = session.xdist_benchmark_found = False
    asked_off = config.getoption("benchmark_disable") and not config.getoption("benchmark_enable")
    from pytest_benchmark.fixture import statistics  # lazy: plugin load

    if not asked_off and statistics is not None:
        session.disabled = False
    if worker:
        session.save = session.autosave = session.json = session.compare_fail = None


def export_benchmarks(config: Any, rename: Mapping[str, str]) -> list[dict[str, Any]]:
    """This worker's pytest-benchmark rows (BenchmarkSession.benchmarks: stats.Metadata) with their raw
    timings, as JSON-able dicts; ``rename`` maps xdist's "nodeid@group" back to the plain nodeid."""
    from pytest_benchmark.utils import safe_dumps  # lazy: plugin load

    out = []
    for bench in _session(config).benchmarks:
        if not bench:  # never timed (the test failed before or --benchmark-disable)
            continue
        row = json.loads(safe_dumps(bench.as_dict(include_data=True)))  # safe_dumps: what pytest-benchmark saves
        row["fullname"] = rename.get(row["fullname"], row["fullname"])
        row["has_error"] = bool(bench.has_error)
        out.append(row)
    return out


def session_document(config: Any) -> dict[str, Any] | None:
    """This session's rows as the document --benchmark-json would write (machine, commit, rows without their raw
    timings), through pytest-benchmark's own hooks; None when nothing was timed."""
    from pytest_benchmark.utils import safe_dumps  # lazy: plugin load

    session = _session(config)
    rows = [bench for bench in session.benchmarks if bench]
    if not rows:
        return None
    commit_info = config.hook.pytest_benchmark_generate_commit_info(config=config)
    config.hook.pytest_benchmark_update_commit_info(config=config, commit_info=commit_info)
    document = config.hook.pytest_benchmark_generate_json(config=config, benchmarks=rows, include_data=False,
                                                          machine_info=session.get_machine_info(),
                                                          commit_info=commit_info)
    return json.loads(safe_dumps(document))


def record_rounds(benchmark: Any, rounds: Sequence[float]) -> None:
    """The fixture's row from rounds timed elsewhere (the code-version A/B's head, in its worker processes): its
    Stats filled through the fixture's own _make_stats, so the table, --benchmark-json, --benchmark-save,
    --benchmark-compare and the history see the head's rounds as if this process had timed them."""
    if not rounds:
        return
    if not hasattr(benchmark, "_make_stats"):
        raise _changed("BenchmarkFixture._make_stats")
    stats = benchmark._make_stats(1)
    for duration in rounds:
        stats.update(float(duration))


def absorb_benchmarks(config: Any, rows: list[dict[str, Any]]) -> None:
    """The controller's side of export_benchmarks: each row becomes a stats.Metadata again, its Stats
    refilled with the raw per-iteration timings, so the table, the saved JSON and --benchmark-compare
    see it exactly as if the controller had timed it."""
    from pytest_benchmark.stats import Metadata  # lazy: plugin load

    session = _session(config)
    for row in rows:
        stats = row.get("stats") or {}
        fixture = SimpleNamespace(name=row["name"], fullname=row["fullname"], group=row.get("group"),
                                  param=row.get("param"), params=row.get("params"),
                                  extra_info=row.get("extra_info") or {}, cprofile_stats=None,
                                  has_error=bool(row.get("has_error")))
        bench = Metadata(fixture, iterations=int(stats.get("iterations") or 1), options=row.get("options") or {})
        for duration in stats.get("data") or []:
            bench.stats.update(float(duration))
        session.benchmarks.append(bench)


def pedantic_until(benchmark: Any, target: Callable[..., Any], setup: Callable[[], tuple], more: Callable[[], bool],
                   timed: Callable[[], float] | None = None) -> None:
    """``benchmark.pedantic(target, setup=setup, iterations=1)`` with the number of rounds decided as they run:
    a round runs while ``more()`` says so. pedantic takes a fixed ``rounds``; this is its loop
    (BenchmarkFixture._raw_pedantic) over the fixture's own _make_stats / _make_runner, so pytest-benchmark's
    table and saved JSON hold every round, as with pedantic.

    ``timed()``: the round's time as the target clocked it itself (the sum of its stage clocks), recorded instead
    of the runner's clock around the whole call. The runner's clock also holds the target's own bookkeeping
    (its loop, list appends, two timer reads: ~1 us a round here), and a preemption or interrupt that lands there
    went into pytest-benchmark's round and not into ours: one 4 ms scheduler tick in 5 rounds of 50 us moved
    pytest-benchmark's mean 44 % from ours (docs/records/measurement.md). With ``timed`` both tables hold the same
    numbers."""
    for attr in ("_make_stats", "_make_runner", "_mode", "disabled", "has_error"):
        if not hasattr(benchmark, attr):
            raise _changed(f"BenchmarkFixture.{attr}")
    if benchmark._mode:
        benchmark.has_error = True
        raise S2STError(f"the benchmark fixture was already used ({benchmark._mode})")
    benchmark._mode = "benchmark.pedantic(...)"
    try:
        if benchmark.disabled:  # --benchmark-disable: one run, as pedantic does
            args, kwargs = setup()
            target(*args, **kwargs)
            return
        stats = benchmark._make_stats(1)
        while more():
            args, kwargs = setup()
            duration, _ = benchmark._make_runner(target, args, kwargs)(None)
            stats.update(timed() if timed is not None else duration)
    except Exception:
        benchmark.has_error = True
        raise


def given(config: Any, flag: str) -> bool:
    """Was pytest-benchmark's ``flag`` given (command line, PYTEST_ADDOPTS or the ini addopts)? Its value
    alone cannot say: the default of --benchmark-warmup (off on CPython) equals an explicit "off"."""
    try:
        addopts = list(config.getini("addopts"))
    except (ValueError, KeyError):
        addopts = []
    args = [*map(str, config.invocation_params.args), *shlex.split(os.environ.get("PYTEST_ADDOPTS", "")), *addopts]
    return any(a == flag or a.startswith(flag + "=") for a in args)


def benchmark_twins(config: Any) -> tuple[dict[str, Any], list[str]]:
    """pytest-benchmark's own round options, for s2st benchmarks: ({s2st setting: value}, refusals).

    --benchmark-min-rounds N -> min_rounds N; --benchmark-max-time S -> rounds added until S seconds
    (its meaning: fill_time) and max_time S; --benchmark-warmup-iterations N -> warmup N; --benchmark-warmup
    on -> nothing to change (s2st always warms up). --benchmark-warmup off, --benchmark-precision and
    --benchmark-min-time have no s2st meaning: a refusal line each, which every s2st benchmark fails with
    (pytest-benchmark's own tests in the session keep them)."""
    out: dict[str, Any] = {}
    refusals: list[str] = []
    if given(config, "--benchmark-min-rounds"):
        out["min_rounds"] = int(config.getoption("benchmark_min_rounds"))
    if given(config, "--benchmark-max-time"):
        out["max_time"] = float(config.getoption("benchmark_max_time"))
        out["fill_time"] = True
    if given(config, "--benchmark-warmup-iterations"):
        out["warmup"] = int(config.getoption("benchmark_warmup_iterations"))  # a negative one refused (session)
    if given(config, "--benchmark-warmup") and not config.getoption("benchmark_warmup"):
        refusals.append("--benchmark-warmup off: s2st benchmarks always warm up (every input shape before the "
                        "timed rounds); to time each new shape cold as fairseq's get_metrics.py does, use "
                        "--s2st-runtime-protocol upstream --s2st-warmup 0")
    if given(config, "--benchmark-precision"):
        refusals.append("--benchmark-precision does not drive s2st benchmarks (its interval is not theirs): use "
                        "--s2st-target-precision FRACTION (95% t interval of the mean round) with --s2st-max-time S")
    if given(config, "--benchmark-min-time"):
        refusals.append("--benchmark-min-time does not apply to s2st benchmarks (a round is one sample through "
                        "every stage, timed once): use --s2st-repeat N or --s2st-min-rounds N")
    return out, refusals


# pytest-benchmark's own table, within 120 columns: its default ten columns make a line of ~210-240 characters
# (each time column is ~20 wide, its name column takes a compared run's " (0001_...)" suffix). Two statistics and
# the round count keep a compare of the embedded default's names within 120; the mean per sample, with its
# interval, is the s2st table's. A user's --benchmark-columns wins.
BENCHMARK_COLUMNS = ("median", "iqr", "rounds")


def narrow_columns(config: Any) -> None:
    """--benchmark-columns defaults to BENCHMARK_COLUMNS when not given (its option default is None: "not
    given"; BenchmarkSession reads it in its trylast pytest_configure, after this plugin's)."""
    option = getattr(config, "option", None)
    if option is not None and hasattr(option, "benchmark_columns") and option.benchmark_columns is None:
        option.benchmark_columns = list(BENCHMARK_COLUMNS)


def without_service_levels(groups: Any) -> tuple[list[tuple[Any, list]], int]:
    """pytest-benchmark's grouped rows less service levels (extra_info s2st_service): a level is one "round" of
    its whole wall time (tens of seconds for a model), which its Min/Median/Rounds columns only make noise of;
    the service table reports the level. -> (groups left, levels left out); a group left empty goes."""
    kept, dropped = [], 0
    for name, benches in groups or []:
        rows = [b for b in benches if not (isinstance(b, Mapping) and isinstance(b.get("extra_info"), Mapping)
                                           and "s2st_service" in b["extra_info"])]
        dropped += len(benches) - len(rows)
        if rows:
            kept.append((name, rows))
    return kept, dropped
