"""pytest glue of ``s2st_benchmark``: the fixture hands the test an S2STBenchmark, which measures one row.

As pytest-benchmark's BenchmarkFixture: the call resolves what the test passed (its callable or the case's
pipeline, its inputs, an A/B baseline, references), measures through the runner (runner.measure_pipeline, the
timed rounds driven by pytest-benchmark's pedantic loop), scores translations (row_scores.py), hands the
row to the pytest_s2st_row_measured hook and saves it into pytest-benchmark's extra_info.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .errors import S2STError
from .gate import given_references
from .measure.device import resolve_device
from .metrics import BY_NAME
from .session import fail, session_of
from .settings import SETTINGS

if TYPE_CHECKING:
    from .protocols import CodeVersionsWorker, SessionOptions

START_RSS_KEY = pytest.StashKey[float]()  # item -> the process's RSS (MiB) when its setup began (plugin.py)


def gate_where(item: pytest.Item) -> str:
    """'test_x.py:12 (s2st_gate of test_name)': where a marker's bad keyword was written."""
    path, line, _ = item.location
    return f"{path}:{(line or 0) + 1} (s2st_gate of {getattr(item, 'originalname', item.name)})"


def _run_settings(request: pytest.FixtureRequest, case: Any) -> tuple[dict, Any]:
    """(settings, RunSettings) of an s2st_benchmark call: the case's, else the session's."""
    from .runner import RunSettings  # lazy: heavy

    state = session_of(request.config)
    settings = case.settings if case else {s.name: state.option(s.name) for s in SETTINGS}
    settings = history_rounds(settings, state)
    try:
        if case is not None:
            device = case.device()
        else:
            device = resolve_device(state.pin_device(settings["device"]))
    except S2STError as exc:
        fail(exc)
    return settings, RunSettings.from_settings(settings, device=device, fill_time=state.fill_time,
                                               # always: a child process or an A/B mode may rebuild it
                                               case=case.to_dict() if case is not None else None)


HISTORY_PRECISION = 0.02  # --s2st-history with no round option: rounds until the runtime mean is known to +-2 %
HISTORY_MAX_TIME = 10.0   # ... within 10 s of timed rounds a test (unless --s2st-max-time says otherwise)


def history_rounds(settings: dict, state: SessionOptions) -> dict:
    """A run kept in the history is worth keeping: 5 rounds measured README's model to +-47-69 %, and the biggest
    jump of a 4-commit history sat at a no-op commit. With --s2st-history and neither a precision target nor a round
    count given, rounds are added until HISTORY_PRECISION (the session's history section names the tests that
    stopped short of it)."""
    if not state.option("history") or settings.get("target_precision") is not None or (
            settings.get("min_rounds") is not None):
        return settings
    max_time = settings.get("max_time")
    if "max_time" not in state.explicit and (max_time is None or max_time > HISTORY_MAX_TIME):
        max_time = HISTORY_MAX_TIME
    return {**settings, "target_precision": HISTORY_PRECISION, "max_time": max_time}


class S2STBenchmark:
    """``s2st_benchmark(model, inputs, *, baseline=None, references=None, ab_mode=None, ab_estimator=None)`` -> the
    row's Measurement; ``ab_mode``: how an A/B with ``baseline=`` times its rounds, a mode of ab.paired_modes() (None:
    in one process); ``ab_estimator``: what judges its paired rounds, a name of ab.ESTIMATORS (None:
    --s2st-ab-estimator's)."""

    def __init__(self, request: pytest.FixtureRequest, benchmark: Any):
        from .benchmark_compat import save_case_ids  # lazy: plugin load

        save_case_ids(benchmark)
        self.request, self.benchmark = request, benchmark
        self.hook_error: str | None = None  # a pytest_s2st_row_measured that raised: the test fails with it
        self.node = request.node
        self.state = session_of(request.config)
        self.case = request.getfixturevalue("s2st_case") if "s2st_case" in request.fixturenames else None
        self._model: Any = None  # the test's own callable, once called: a code-version worker reports its file

    def __call__(self, pipeline: Any, dataset: Any, *, baseline: Any = None, references: Any = None,
                 ab_mode: str | None = None, ab_estimator: str | None = None) -> Any:
        state, case = self.state, self.case
        if state.benchmark_refusals:
            fail(state.benchmark_refusals[0])
        for keyword, value in (("ab_mode", ab_mode), ("ab_estimator", ab_estimator)):
            if value is not None and baseline is None:
                fail(S2STError(f"{self.node.nodeid}: s2st_benchmark(..., {keyword}={value!r}) times an A/B: it needs "
                               "baseline="))
        versions = state.code_versions
        if versions is not None:  # pytest-benchmark times nothing here: its "fixture was not used" does not apply
            self.benchmark._mode = "s2st: timed by the code-version A/B"
        if versions is not None and versions.controller:  # both sides measured in the workers (plugin_versions)
            measurement = versions.compare(self.node, ab_estimator)
            measurement.info["identity"] = f"{self.node.path.name}::{self.node.name}"
            state.add_measurement(self.node, measurement)
            self._save(measurement)
            from .benchmark_compat import record_rounds  # lazy: plugin load

            record_rounds(self.benchmark, versions.head_rounds(self.node))  # the head's row: JSON, history, compare
            self._hook_failed()
            return measurement
        if versions is not None:
            baseline = None  # a code-version worker times its own tree's model; the other side is the baseline
        # --s2st-isolate re-creates in a child what the test benchmarks: the case's pipeline from the case,
        # anything else (the test's own callable) from its pickle
        own = not self._is_case_pipeline(pipeline)
        benchmarked, benchmarked_baseline = pipeline, baseline
        self._model = benchmarked if own else None
        pipeline, baseline, dataset, references = self._resolve(pipeline, baseline, dataset, references, own)
        settings, run_settings = _run_settings(self.request, case)
        if ab_mode is not None:
            run_settings.ab_mode = ab_mode
        if ab_estimator is not None:
            run_settings.ab_estimator = ab_estimator
        if own and run_settings.isolate:
            run_settings.isolate_model = benchmarked
        if own and run_settings.instructions != "off":  # the valgrind child re-creates it from its pickle
            run_settings.instructions_model = benchmarked
        if run_settings.instructions != "off" and benchmarked_baseline is not None and (  # an A/B's baseline, likewise
                not self._is_case_pipeline(benchmarked_baseline)):
            run_settings.instructions_baseline = benchmarked_baseline
        if not own and case.case_id in state.case_start_rss:  # the case's pipeline: its start is before its build
            run_settings.start_rss_mib = state.case_start_rss[case.case_id]
        else:  # the test's own callable: what the test built counts, from the start of its setup
            run_settings.start_rss_mib = self.node.stash.get(START_RSS_KEY, None)
            run_settings.start_what = "before the test's setup"
        measurement = self._new_row(pipeline)
        self._measure(pipeline, dataset, run_settings, measurement, baseline, versions)
        if references is not None:
            self._given_translation(references, measurement)
        elif case is not None:
            self._translation(dataset, measurement, pipeline)
        self._save(measurement)
        if versions is not None:
            versions.measured(self.node, self.benchmark.extra_info["s2st"])
        if settings.get("dump_dir"):
            _dump(measurement, case, settings["dump_dir"])
        self._hook_failed()
        return measurement

    def _hook_failed(self) -> None:
        """After the row is saved, counted and dumped: a pytest_s2st_row_measured that raised fails the test."""
        if self.hook_error:
            fail(self.hook_error)

    def _is_case_pipeline(self, model: Any) -> bool:
        """``model`` is the case's s2st_pipeline (not the test's own callable)."""
        return (self.case is not None and "s2st_pipeline" in self.request.fixturenames
                and model is self.request.getfixturevalue("s2st_pipeline"))

    def _resolve(self, pipeline: Any, baseline: Any, dataset: Any, references: Any, own: bool) -> tuple:
        """(pipeline, baseline, inputs, references) as the runner takes them; a bad one fails the test."""
        from .datasets import inputs_from  # lazy: heavy
        from .pipelines.callable import from_function, is_pipeline  # lazy: plugin load

        where = f"{self.node.nodeid}: s2st_benchmark(model, inputs)"
        try:
            if not is_pipeline(pipeline):
                pipeline = from_function(pipeline, where)
            if baseline is not None and not is_pipeline(baseline):
                baseline = from_function(baseline, f"{self.node.nodeid}: s2st_benchmark(..., baseline=)")
            dataset = inputs_from(dataset, where)
            if references is not None:
                if not own:
                    raise S2STError(f"{where}: references= scores your own callable's outputs; the case's pipeline "
                                    "takes its references from the config (general.references)")

                references = given_references(references, len(dataset), where)
        except S2STError as exc:
            fail(exc)
        return pipeline, baseline, dataset, references

    def _new_row(self, pipeline: Any) -> Any:
        """The row, in the session before it is measured: a stage that crashes half-way keeps what it measured."""
        from .measurement import Measurement  # lazy: plugin load

        case, node = self.case, self.node
        measurement = Measurement(case.case_id if case else node.name, pipeline.model_type)
        if case is not None:
            measurement.info["config"] = str(case.config.path)
        # what compare matches on: independent of the rootdir (see rows.identity)
        measurement.info["identity"] = f"{node.path.name}::{node.name}"
        if self.state.worker:
            measurement.info["xdist_worker"] = self.state.worker
        self.state.add_measurement(node, measurement)
        return measurement

    def _measure(self, pipeline: Any, dataset: Any, run_settings: Any, measurement: Any, baseline: Any,
                 versions: CodeVersionsWorker | None) -> None:
        from . import progress  # lazy: plugin load
        from .benchmark_compat import fixture_timer, pedantic_until, timer_name  # lazy: plugin load
        from .runner import measure_pipeline  # lazy: heavy

        benchmark = self.benchmark

        def drive(rounds) -> str:
            rounds.timer = timer = fixture_timer(benchmark)  # stage clocks share pytest-benchmark's timer
            if versions is not None:  # the controller orders each round (versions/worker.py)
                versions.serve(self.node, rounds, self._model)  # the model's file: whose code it is
                return timer_name(timer)
            # pedantic's loop, as many rounds as the policy says (a count, or until --s2st-target-precision is
            # reached); pytest-benchmark records each round as our stage clocks timed it, so its table and ours
            # hold the same numbers (benchmark_compat.pedantic_until)
            pedantic_until(benchmark, rounds.run, rounds.setup, rounds.more, timed=rounds.last_round_s)
            return timer_name(timer)

        try:
            # a slow model's passes take minutes: a line every 10 s (one write from another thread, outside no clock
            # that matters: the timed rounds are per sample, the line costs microseconds)
            with self.state.timing_turn(), progress.phase(f"measuring {measurement.case_id} (warm-up, timing, "
                                                          "memory and FLOPs passes)"):
                measure_pipeline(pipeline, dataset, run_settings, case_id=measurement.case_id,
                                 drive_timing=drive, measurement=measurement, baseline=baseline,
                                 progress=_progress_writer(self.request.config, measurement.case_id))
        except S2STError as exc:  # a model's own one-line refusal (e.g. too few frames for Griffin-Lim)
            fail(exc)

    def _translation(self, samples: list, measurement: Any, pipeline: Any) -> None:
        """The case's translation scores and gate (row_scores.py)."""
        from .row_scores import score_case_row, translation_baseline  # lazy: plugin load

        state = self.state
        marker = self.node.get_closest_marker("s2st_gate")

        def baseline_of(path: str) -> dict:
            return translation_baseline(path, state.translation_baselines, (m for _, m in state.results),
                                        state.load_extra_case)

        try:
            score_case_row(self.case, samples, measurement, pipeline, marker.kwargs if marker else None,
                           gate_where(self.node) if marker else None, baseline_of)
        except S2STError as exc:
            fail(exc)

    def _given_translation(self, references: list, measurement: Any) -> None:
        """s2st_benchmark(fn, inputs, references=[...]): the callable's scores and gate (row_scores.py)."""
        from .row_scores import score_given_row  # lazy: plugin load

        case = self.case
        tokenize = case.settings.get("bleu_tokenize") if case is not None else self.state.option("bleu_tokenize")
        marker = self.node.get_closest_marker("s2st_gate")
        try:
            score_given_row(case.config.quality if case is not None else None, references, measurement, tokenize,
                            marker.kwargs if marker else None,
                            f"{case.config.path} (quality)" if case is not None else gate_where(self.node))
        except S2STError as exc:
            fail(exc)

    def _save(self, measurement: Any) -> None:
        """Plugins see the measured row (pytest_s2st_row_measured), then it goes into pytest-benchmark's JSON. A
        plugin that raised fails the test with one line at its end (_hook_failed): the row is kept and shown."""
        from .hookcall import call_hook  # lazy: plugin load

        config = self.request.config
        self.hook_error = call_hook(config, "pytest_s2st_row_measured", config=config, item=self.node,
                                    measurement=measurement)
        try:
            self.benchmark.extra_info["s2st"] = measurement.to_dict()
        except S2STError as exc:  # a metric a plugin added that the metric table lacks: the test fails, naming it,
            _drop_unknown_metrics(measurement)  # and the row keeps what was measured for the session's tables
            self.benchmark.extra_info["s2st"] = measurement.to_dict()
            fail(exc)


def _drop_unknown_metrics(measurement: Any) -> None:
    while measurement is not None:
        measurement.quality = {k: m for k, m in measurement.quality.items() if k in BY_NAME}
        for stage in measurement.stages:
            stage.metrics = {k: m for k, m in stage.metrics.items() if k in BY_NAME}
        measurement = measurement.baseline


def _dump(measurement: Any, case: Any, dump_dir: str) -> None:
    from .dump import dump_waveforms  # lazy: heavy
    from .runs import safe_name  # lazy: plugin load

    general = case.config.general if case else {}
    speech = [o for o in measurement.outputs if isinstance(o, dict) and "waveform" in o]
    if speech:
        try:
            dump_waveforms(speech, Path(dump_dir) / safe_name(measurement.case_id),
                           str(general.get("dump_waveform_file_prefix", "")), general.get("target_sr"))
        except S2STError as exc:
            fail(exc)


def _progress_writer(config: pytest.Config, case_id: str):
    """Progress of long datasets on the terminal, between the test's own output (capture suspended; through the
    writer plugin._install_progress installed, so one line at a time and none under -q)."""
    if config.get_verbosity() < 0:
        return None
    from . import progress  # lazy: plugin load

    def report(stage: str, phase: str, done: int, total: int) -> None:
        progress.write(f"s2st [{case_id}] {stage}: {phase} {done}/{total}")

    return report
