"""pytest glue: options with ini twins, markers, parametrization, fixtures, verdicts, extra table, compare.

Knows pytest, knows no model. Importing this module must stay cheap: no torch, fairseq or
qwen_tts here; the core modules that need them are imported inside fixtures.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from .errors import S2STError
from .settings import SETTINGS, argparse_type

S2ST_FIXTURES = {"s2st_case", "s2st_pipeline", "s2st_dataset"}
MEASUREMENT_KEY = pytest.StashKey["Any"]()
VERDICT_KEY = pytest.StashKey["Any"]()

MARKERS = {
    "s2st_budget(runtime_s=, peak_rss_mib=, peak_delta_mib=, device_peak_mib=, flops=, stage=None)":
                   "fail the test when a measured metric is over its limit; a budgeted metric that could not be "
                   "measured makes the test INCONCLUSIVE (a failure under --s2st-strict).",
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
    if not S2ST_FIXTURES & set(metafunc.fixturenames):
        return
    state = _session(metafunc.config)
    try:
        cases = state.load_cases()
    except S2STError as exc:
        raise pytest.UsageError(str(exc)) from None
    marker = metafunc.definition.get_closest_marker("s2st_models")
    if marker:
        wanted = {str(a) for a in marker.args}
        cases = [c for c in cases if c.model_type in wanted or c.case_id in wanted]
    metafunc.parametrize("s2st_case", cases, ids=[c.case_id for c in cases], indirect=True, scope="session")


def _fail(exc: S2STError) -> None:
    pytest.fail(str(exc), pytrace=False)


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
                         drive_timing=drive, measurement=measurement)
        benchmark.extra_info["s2st"] = measurement.to_dict()
        if settings.get("dump_dir"):
            from .dump import dump_outputs

            general = case.config.general if case else {}
            dump_outputs(measurement.outputs, settings["dump_dir"], case_id=measurement.case_id,
                         prefix=str(general.get("dump_waveform_file_prefix", "")),
                         target_sr=general.get("target_sr"))
        return measurement

    return run


def _item_verdict(item: pytest.Item):
    from .budget import PASS, Verdict, check_budget, parse_budget

    measurement = item.stash.get(MEASUREMENT_KEY, None)
    markers = list(item.iter_markers("s2st_budget"))
    if not markers:
        return None
    verdicts = []
    for marker in markers:
        limits, stage = parse_budget(marker.kwargs, item.nodeid)
        if measurement is None:
            verdicts.append(Verdict("INCONCLUSIVE", ["s2st_budget set but the test measured nothing (call s2st_benchmark)"]))
        else:
            verdicts.append(check_budget(measurement, limits, stage))
    order = {"FAIL": 0, "INCONCLUSIVE": 1, PASS: 2}
    worst = min(verdicts, key=lambda v: order[v.status])
    reasons = [r for v in verdicts if v.status == worst.status for r in v.reasons]
    return Verdict(worst.status, reasons)


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
    if benchmark is not None and "s2st" in benchmark.extra_info:
        benchmark.extra_info["s2st"]["verdict"] = verdict.to_dict()
    state = _session(item.config)
    if verdict.status == "FAIL":
        report.outcome = "failed"
        report.longrepr = "s2st budget exceeded:\n" + "\n".join(f"  {r}" for r in verdict.reasons)
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
    if state is None or not state.results:
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
