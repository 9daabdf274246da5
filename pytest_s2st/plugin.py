"""pytest glue: options with ini twins, markers, parametrization, fixtures, verdicts, extra table, compare.

Knows pytest, knows no model. Importing this module must stay cheap: no torch, fairseq or
qwen_tts here; the core modules that need them are imported inside fixtures.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from .errors import S2STError
from .settings import SETTINGS, argparse_type

S2ST_FIXTURES = {"s2st_case", "s2st_pipeline", "s2st_dataset", "s2st_service", "s2st_workload"}
MEASUREMENT_KEY = pytest.StashKey["Any"]()
VERDICT_KEY = pytest.StashKey["Any"]()

MARKERS = {
    "s2st_budget(runtime_s=, peak_rss_mib=, peak_delta_mib=, device_peak_mib=, flops=, stage=None)":
                   "fail the test when a measured metric is over its limit; a budgeted metric that could not be "
                   "measured makes the test INCONCLUSIVE (a failure under --s2st-strict).",
    "s2st_gate(scorer_id=, min_improvement_pct=, max_error_rate_increase=, max_speaker_drop=, max_duration_change_pct=, "
    "max_ttfa_regression_pct=, speed_metric=, aggregate=)":
                   "quality gate of a service benchmark (s2st_load): the frozen policy, over the config's `quality:` "
                   "section; the candidate is judged against the baseline: PASS passes, FAIL fails, missing evidence "
                   "is INCONCLUSIVE.",
    "s2st_models(*names)": "run this benchmark only on the configured cases whose model_type or case id "
                   "is one of names (e.g. 'S2UT', 'TTS-tiny').",
}


@dataclass
class S2STSession:
    """Per-session state: resolved cases and what was measured (for the table, verdicts and compare)."""

    config: pytest.Config
    explicit: dict[str, Any]
    cases: list[Any] | None = None
    results: list[tuple[Any, Any]] = field(default_factory=list)  # (item, Measurement)
    service_results: list[tuple[Any, dict]] = field(default_factory=list)  # (item, load summary)
    evidence_root: Any = None
    baselines: dict[str, Any] = field(default_factory=dict)  # quality.baseline config -> (case, reference server)
    plots: list[str] = field(default_factory=list)
    inconclusive: list[tuple[str, list[str]]] = field(default_factory=list)
    regressions: list[str] = field(default_factory=list)

    def option(self, name: str) -> Any:
        if name in self.explicit:
            return self.explicit[name]
        from .cases import resolve_settings

        return resolve_settings({}, self.explicit, self.ini, lambda key: key)[name]

    def ini(self, name: str) -> Any:
        return self.config.getini(name)

    def load_cases(self) -> list[Any]:
        if self.cases is None:
            from .cases import load_case

            paths = self.config.getoption("s2st_config") or self.ini("s2st_config")
            if not paths:
                from .defaults import default_config_paths

                paths = default_config_paths()
            cases = [load_case(p, self.explicit, self.ini) for p in paths]
            seen: dict[str, Any] = {}
            for case in cases:
                if case.case_id in seen:
                    raise S2STError(f"{case.config.path}: case id {case.case_id!r} is also used by "
                                    f"{seen[case.case_id].config.path}; set general.name to tell them apart")
                seen[case.case_id] = case
            self.cases = cases
        return self.cases


def _session(config: pytest.Config) -> S2STSession:
    return config.stash[SESSION_KEY]


SESSION_KEY = pytest.StashKey[S2STSession]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("s2st", "speech-model benchmarks (pytest-s2st)")
    group.addoption("--s2st-config", action="append", dest="s2st_config", default=None, metavar="YAML",
                    help="benchmark config (general + stage1..3, as fairseq's get_metrics.py); repeat for more "
                         "cases; default: the embedded tiny models")
    parser.addini("s2st_config", "benchmark configs used when --s2st-config is not given", type="paths")
    for setting in SETTINGS:
        kwargs: dict[str, Any] = {"dest": setting.dest, "default": None, "help": f"{setting.help} (default: {setting.default})"}
        if setting.parse.__name__ == "boolean":
            kwargs.update(action="store_true", help=setting.help)
        else:
            kwargs.update(type=argparse_type(setting), metavar=setting.metavar or setting.name.upper())
        group.addoption(setting.flag, **kwargs)
        parser.addini(setting.ini, f"ini twin of {setting.flag}", default=None)


def pytest_configure(config: pytest.Config) -> None:
    for name, help_text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {help_text}")  # pytest reads the name before "("
    explicit = {s.name: config.getoption(s.dest) for s in SETTINGS if config.getoption(s.dest) not in (None, False)}
    state = S2STSession(config, explicit)
    config.stash[SESSION_KEY] = state
    try:
        # validate every global setting now, so a bad ini value is a usage error before any test runs
        compare_fail = state.option("compare_fail")
        state.option("strict")
        if config.getoption("s2st_config"):
            state.load_cases()  # a bad config is a usage error before collection
    except S2STError as exc:
        raise pytest.UsageError(str(exc)) from None
    if compare_fail and not config.getoption("benchmark_compare", None):
        raise pytest.UsageError("--s2st-compare-fail needs --benchmark-compare (a saved run to compare with)")


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    state = config.stash.get(SESSION_KEY, None)
    if state is None or not state.cases:
        return None
    return [f"s2st: {len(state.cases)} case(s): {', '.join(c.case_id for c in state.cases)}"]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    names = set(metafunc.fixturenames)
    needs_case, needs_level = bool(S2ST_FIXTURES & names), "s2st_concurrency" in names
    if not (needs_case or needs_level):
        return
    state = _session(metafunc.config)
    if not needs_case:
        levels = state.option("concurrency")
        metafunc.parametrize("s2st_concurrency", levels, ids=[f"c{c}" for c in levels], scope="session")
        return
    try:
        cases = state.load_cases()
    except S2STError as exc:
        raise pytest.UsageError(str(exc)) from None
    marker = metafunc.definition.get_closest_marker("s2st_models")
    if marker:
        wanted = {str(a) for a in marker.args}
        cases = [c for c in cases if c.model_type in wanted or c.case_id in wanted]
    elif "s2st_service" in names:  # a service benchmark: only the cases a speech service can serve
        serving = [c for c in cases if c.serves_speech]
        if not serving and cases:
            reason = (f"no configured case serves speech from text ({', '.join(c.case_id for c in cases)} do not); "
                      "add a TTS/Qwen3TTS/callable case or mark the test s2st_models(...)")
            skip = pytest.mark.skip(reason=reason)
            if needs_level:
                metafunc.parametrize(["s2st_case", "s2st_concurrency"], [pytest.param(None, None, marks=skip)],
                                     ids=["no-speech-case"], indirect=["s2st_case"], scope="session")
            else:
                metafunc.parametrize("s2st_case", [pytest.param(None, marks=skip)], ids=["no-speech-case"],
                                     indirect=True, scope="session")
            return
        cases = serving
    if not needs_level:
        metafunc.parametrize("s2st_case", cases, ids=[c.case_id for c in cases], indirect=True, scope="session")
        return
    # each case brings its own levels (general.concurrency), so case and level are parametrized together
    pairs = [(c, level) for c in cases for level in c.settings["concurrency"]]
    metafunc.parametrize(["s2st_case", "s2st_concurrency"], pairs, ids=[f"{c.case_id}-c{level}" for c, level in pairs],
                         indirect=["s2st_case"], scope="session")


def _fail(exc: "S2STError | str") -> None:
    """Fail the test with one line: no traceback, no "During handling of the above exception"."""
    __tracebackhide__ = True
    raise pytest.fail.Exception(str(exc), pytrace=False) from None


@pytest.fixture(scope="session")
def s2st_case(request: pytest.FixtureRequest):
    """The benchmark case (config + resolved settings) this test is parametrized with."""
    return request.param


@pytest.fixture(scope="session")
def s2st_pipeline(s2st_case):
    """The case's pipeline, loaded once per session."""
    from .pipelines.base import build_pipeline

    try:
        pipeline = build_pipeline(s2st_case.model_type, s2st_case.config.stages,
                                  device=s2st_case.device().name, config_path=s2st_case.config.path)
    except S2STError as exc:
        _fail(exc)
    yield pipeline
    pipeline.close()


@pytest.fixture(scope="session")
def s2st_dataset(s2st_case):
    """The case's samples (npy or raw), dataset_size applied."""
    from .datasets import load_dataset

    path = s2st_case.config.general.get("dataset_path")
    if path is None:
        pytest.fail(f"{s2st_case.config.path}: no dataset: set general.dataset_path or --s2st-dataset-path",
                    pytrace=False)
    try:
        return load_dataset(path, s2st_case.settings["dataset_type"], s2st_case.settings["dataset_size"],
                            sample_rate=int(s2st_case.config.general.get("sample_rate", 16000)))
    except S2STError as exc:
        _fail(exc)


@pytest.fixture
def s2st_benchmark(request: pytest.FixtureRequest, benchmark):
    """Call as ``s2st_benchmark(pipeline, dataset)``: measures runtime, memory and FLOPs of every stage."""
    from .runner import Measurement, RunSettings, measure_pipeline

    state = _session(request.config)
    case = request.getfixturevalue("s2st_case") if "s2st_case" in request.fixturenames else None

    def run(pipeline, dataset) -> Measurement:
        settings = case.settings if case else {s.name: state.option(s.name) for s in SETTINGS}
        try:
            if case is not None:
                device = case.device()
            else:
                from .measure.device import resolve_device

                device = resolve_device(settings["device"])
        except S2STError as exc:
            _fail(exc)
        run_settings = RunSettings(device=device, repeat=settings["repeat"], warmup=settings["warmup"],
                                   memory=settings["memory"], flops=settings["flops"], threads=settings["threads"])
        measurement = Measurement(case.case_id if case else request.node.name, pipeline.model_type)
        if case is not None:
            measurement.info["config"] = str(case.config.path)
        request.node.stash[MEASUREMENT_KEY] = measurement  # kept even if a stage crashes half-way
        state.results.append((request.node, measurement))

        def drive(rounds) -> str:
            rounds.timer = benchmark._timer
            benchmark.pedantic(rounds.run, setup=rounds.setup, rounds=rounds.count, iterations=1, warmup_rounds=0)
            timer = benchmark._timer
            return f"{getattr(timer, '__module__', '')}.{getattr(timer, '__name__', repr(timer))}".lstrip(".")

        samples = list(dataset)
        if settings.get("dataset_size"):
            samples = samples[: settings["dataset_size"]]
        measure_pipeline(pipeline, samples, run_settings, case_id=measurement.case_id,
                         drive_timing=drive, measurement=measurement,
                         progress=_progress_writer(request.config, measurement.case_id))
        benchmark.extra_info["s2st"] = measurement.to_dict()
        if settings.get("dump_dir"):
            from .dump import dump_waveforms

            general = case.config.general if case else {}
            speech = [o for o in measurement.outputs if isinstance(o, dict) and "waveform" in o]
            if speech:
                try:
                    dump_waveforms(speech, Path(settings["dump_dir"]) / measurement.case_id,
                                   str(general.get("dump_waveform_file_prefix", "")), general.get("target_sr"))
                except S2STError as exc:
                    _fail(exc)
        return measurement

    return run


def _progress_writer(config: pytest.Config, case_id: str):
    """Progress of long datasets on the terminal, between the test's own output (capture suspended)."""
    tr = config.pluginmanager.get_plugin("terminalreporter")
    capman = config.pluginmanager.get_plugin("capturemanager")
    if tr is None or config.getoption("quiet", 0) > 1:
        return None

    def report(stage: str, phase: str, done: int, total: int) -> None:
        with capman.global_and_fixture_disabled() if capman else contextlib.nullcontext():
            tr.ensure_newline()
            tr.write_line(f"s2st [{case_id}] {stage}: {phase} {done}/{total}")

    return report


def _item_verdict(item: pytest.Item):
    """Budgets and evidence of one test -> the worst verdict (FAIL > INCONCLUSIVE > PASS), or None."""
    from .budget import FAIL, INCONCLUSIVE, PASS, Verdict, check_budget, parse_budget, service_lookup

    measurement = item.stash.get(MEASUREMENT_KEY, None)
    service = item.stash.get(_service_key(), None)
    verdicts = []
    for marker in item.iter_markers("s2st_budget"):
        limits, stage = parse_budget(marker.kwargs, item.nodeid)
        if measurement is not None:
            verdicts.append(check_budget(measurement.metric, limits, stage, [s.name for s in measurement.stages]))
        elif service is not None:
            verdicts.append(check_budget(service_lookup(service), limits))
        else:
            verdicts.append(Verdict(INCONCLUSIVE, ["s2st_budget set but the test measured nothing "
                                                   "(call s2st_benchmark or s2st_load)"]))
    if service is not None:
        from .plugin_service import gate_verdict, service_evidence_reasons

        reasons = service_evidence_reasons(service)
        verdicts.append(Verdict(INCONCLUSIVE, reasons) if reasons else Verdict(PASS))
        gate = gate_verdict(service)
        if gate is not None:
            verdicts.append(gate)
    if not verdicts:
        return None
    order = {FAIL: 0, INCONCLUSIVE: 1, PASS: 2}
    worst = min(verdicts, key=lambda v: order[v.status])
    reasons = [r for v in verdicts if v.status != PASS for r in v.reasons]
    # a speedup is reported only when everything passed
    speedup = next((v.speedup for v in verdicts if v.speedup), None) if worst.status == PASS else None
    return Verdict(worst.status, reasons, speedup=speedup)


def _service_key():
    from .plugin_service import SERVICE_KEY

    return SERVICE_KEY


def pytest_runtest_setup(item: pytest.Item) -> None:
    from .budget import parse_budget

    for marker in item.iter_markers("s2st_budget"):
        try:
            parse_budget(marker.kwargs, item.nodeid)
        except S2STError as exc:
            _fail(exc)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    if report.when != "call":
        return
    measurement = item.stash.get(MEASUREMENT_KEY, None)
    if not report.passed:
        if measurement is not None:
            report.s2st_verdict = "ERROR"
        return
    verdict = _item_verdict(item)
    if verdict is None:
        return
    item.stash[VERDICT_KEY] = verdict
    report.s2st_verdict = verdict.status
    report.s2st_reasons = list(verdict.reasons)
    benchmark = getattr(item, "funcargs", {}).get("benchmark")
    for key in ("s2st", "s2st_service"):
        if benchmark is not None and key in benchmark.extra_info:
            benchmark.extra_info[key]["verdict"] = verdict.to_dict()
    state = _session(item.config)
    if verdict.status == "FAIL":
        report.outcome = "failed"
        report.longrepr = "s2st FAIL:\n" + "\n".join(f"  {r}" for r in verdict.reasons)
    elif verdict.status == "INCONCLUSIVE":
        state.inconclusive.append((item.nodeid, verdict.reasons))
        if state.option("strict"):
            report.outcome = "failed"
            report.longrepr = "s2st INCONCLUSIVE (failing under --s2st-strict):\n" + "\n".join(f"  {r}" for r in verdict.reasons)


def pytest_report_teststatus(report: pytest.TestReport, config: pytest.Config):
    if report.when == "call" and report.passed and getattr(report, "s2st_verdict", None) == "INCONCLUSIVE":
        return "inconclusive", "I", ("INCONCLUSIVE", {"yellow": True})
    return None


def _rows(state: S2STSession):
    from .report import rows_from

    rows = []
    for item, measurement in state.results:
        verdict = item.stash.get(VERDICT_KEY, None)
        data = measurement.to_dict()
        rows += rows_from(item.name, item.nodeid, data, verdict.status if verdict else "")
    return rows


def _compared(config: pytest.Config) -> dict[str, Any]:
    from .report import compared_rows

    bs = getattr(config, "_benchmarksession", None)
    out: dict[str, Any] = {}
    for mapping in (getattr(bs, "compared_mapping", None) or {}).values():
        for saved in mapping.values():
            out.update(compared_rows(saved))
    return out


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    state = session.config.stash.get(SESSION_KEY, None)
    if state is None:
        return
    if state.service_results and state.option("plot"):
        from .plot import plot_service

        try:
            state.plots += [str(p) for p in plot_service(state.service_results, state.option("plot"))]
        except S2STError as exc:
            state.plots.append(f"not written: {exc}")
    if not state.results:
        return
    limits = state.option("compare_fail")
    if limits:
        from .report import regressions

        state.regressions = regressions(_rows(state), _compared(session.config), limits)
        if state.regressions and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if state.inconclusive and state.option("strict") and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    state = config.stash.get(SESSION_KEY, None)
    if state is None:
        return
    tr = terminalreporter
    if state.results:
        from .report import missing_notes, render_compare, render_table

        rows = _rows(state)
        tr.write_sep("-", "s2st: runtime per sample, peak memory, FLOPs")
        for line in render_table(rows):
            tr.write_line(line)
        for note in missing_notes(rows):
            tr.write_line(f"note: {note}")
        compared = _compared(config)
        if compared:
            lines = render_compare(rows, compared)
            if lines:
                tr.write_sep("-", "s2st: compared with the saved run (then -> now)")
                for line in lines:
                    tr.write_line(line)
    if state.service_results:
        from .plugin_service import render_service_table

        tr.write_sep("-", "s2st: service (TTFA, RTF, latency per concurrency level)")
        for line in render_service_table(state.service_results):
            tr.write_line(line)
        for item, data in state.service_results:
            gate = data.get("gate")
            if gate:
                speedup = ", ".join(f"{k} {v:.3f}x" for k, v in sorted((gate.get("speedup") or {}).items()))
                tr.write_line(f"gate {item.name}: {gate['status']} against {data.get('baseline_dir')}"
                              + (f"; speedup ({data.get('policy', {}).get('speed_metric', 'rtf')}): {speedup}" if speedup else ""))
        tr.write_line(f"evidence (requests.jsonl, wav/): {state.evidence_root}")
        for path in state.plots:
            tr.write_line(f"plot: {path}")
    if state.inconclusive:
        tr.write_sep("=", "s2st INCONCLUSIVE", yellow=True)
        for nodeid, reasons in state.inconclusive:
            tr.write_line(f"{nodeid}:")
            for reason in reasons:
                tr.write_line(f"    {reason}")
    if state.regressions:
        tr.write_sep("=", "s2st regressions (--s2st-compare-fail)", red=True)
        for line in state.regressions:
            tr.write_line(line)
