"""pytest glue: options with ini twins, markers, parametrization, fixtures, verdicts, extra table, compare.

Thin: s2st_benchmark hands off to plugin_benchmark.S2STBenchmark, a test's verdict is outcome.py's (its gates
over the facts gathered here), the session's state and tables are session.py's; the public hooks are
hookspec.py's.

Knows pytest, knows no model. Importing this module must stay cheap: no torch, fairseq or
qwen_tts here; the core modules that need them are imported inside fixtures.
"""
from __future__ import annotations

import contextlib
import importlib
from pathlib import Path
from typing import Any

import pytest

from .errors import S2STError
from .gate import gate_help, gate_policy, gate_signature
from .inputs import show
from .metrics import budget_signature
from .plugin_benchmark import START_RSS_KEY, S2STBenchmark, gate_where
from .session import MEASUREMENT_KEY, SERVICE_KEY, SESSION_KEY, S2STSession, fail, session_of
from .settings import BY_NAME, SETTINGS, argparse_type

S2ST_FIXTURES = {"s2st_case", "s2st_pipeline", "s2st_dataset", "s2st_service", "s2st_workload"}

MARKERS = {
    budget_signature():
                   "fail the test when a measured metric is over its limit; a budgeted metric that could not be "
                   "measured makes the test INCONCLUSIVE (a failure under --s2st-strict).",
    gate_signature(): gate_help(),
    "s2st_models(*names)": "run this benchmark only on the configured cases whose model_type or case id "
                   "is one of names (e.g. 'S2UT', 'TTS-tiny').",
}


SERVICE_PLUGIN = ("s2st_service", "pytest_s2st.plugin_service")


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from . import hookspec  # lazy: plugin load

    pluginmanager.add_hookspecs(hookspec)


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    # one plugin: this module brings the service fixtures along, so `-p no:s2st` disables both (they were a second
    # pytest11 entry point, which `-p no:s2st` left registered); `-p no:s2st_service` still drops the service part.
    # An install from before that change still has the second entry point: it then finds the name taken and skips.
    name, module = SERVICE_PLUGIN
    if pluginmanager.get_plugin(name) is None and not pluginmanager.is_blocked(name):
        service = importlib.import_module(module)
        if not pluginmanager.is_registered(service):
            pluginmanager.register(service, name)
    group = parser.getgroup("s2st", "speech-model benchmarks (pytest-s2st)")
    group.addoption("--s2st-config", action="append", dest="s2st_config", default=None, metavar="YAML",
                    help="benchmark config (general + stage1..3, as fairseq's get_metrics.py); repeat for more "
                         "cases; default: the embedded tiny models")
    parser.addini("s2st_config", "benchmark configs used when --s2st-config is not given", type="paths")
    for setting in SETTINGS:
        # argparse %-formats help texts: a literal % (e.g. "flops:1%") must be doubled
        help_text = setting.help.replace("%", "%%")
        kwargs: dict[str, Any] = {"dest": setting.dest, "default": None, "help": help_text + setting.default_text}
        if setting.parse.__name__ == "boolean":
            kwargs.update(action="store_true", help=help_text)
        else:
            kwargs.update(type=argparse_type(setting), metavar=setting.metavar or setting.name.upper())
        group.addoption(setting.flag, **kwargs)
        parser.addini(setting.ini, setting.ini_help, default=None)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """--s2st-processes N: N xdist workers that each run every test (--dist each); xdist's own cmdline_main, after
    this one, turns numprocesses into its workers. The controller folds their rows into one side (plugin_xdist)."""
    flag = config.getoption(BY_NAME["processes"].dest, None)
    ini = config.getini(BY_NAME["processes"].ini) if flag is None else None
    try:
        n = flag if flag is not None else (BY_NAME["processes"].parse(ini) if ini not in (None, "") else None)
    except ValueError as exc:
        raise pytest.UsageError(f"ini {BY_NAME['processes'].ini}: {exc}") from None
    if n is None or hasattr(config, "workerinput"):
        return
    where = "--s2st-processes" if flag is not None else f"ini {BY_NAME['processes'].ini}"
    if n < 2:
        raise pytest.UsageError(f"{where} {n}: needs 2 or more processes (one is a plain run; 3 give a verdict)")
    if not config.pluginmanager.hasplugin("xdist"):
        raise pytest.UsageError(f"{where} {n}: runs its processes as pytest-xdist workers; install pytest-xdist")
    if config.option.numprocesses or config.option.dist not in ("no", "each"):
        raise pytest.UsageError(f"{where} {n}: sets the xdist workers itself (-n {n} --dist each); drop -n/--dist")
    config.option.numprocesses, config.option.dist = n, "each"


def pytest_configure(config: pytest.Config) -> None:
    for name, help_text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {help_text}")  # pytest reads the name before "("
    state = S2STSession(config)
    config.stash[SESSION_KEY] = state
    from .benchmark_compat import narrow_columns  # lazy: plugin load

    narrow_columns(config)  # pytest-benchmark's table within 120 columns unless --benchmark-columns says otherwise
    _install_progress(config)
    try:
        state.adopt_benchmark_options()  # pytest-benchmark's --benchmark-min-rounds & co: mapped or refused
        # validate every global setting now, so a bad ini value is a usage error before any test runs
        compare_fail = state.option("compare_fail")
        state.option("strict")
        state.option("shard")
        state.check_evidence_dir()
        state.option("level_parts_wait")
        if config.getoption("s2st_config") or state.ini("s2st_config"):
            state.load_cases()  # a bad config is a usage error before collection
        else:  # the embedded demo is staged under $S2ST_CACHE_DIR if a test asks for a case: a bad one is named now
            from .tiny.cache import cache_root  # lazy: plugin load

            cache_root()
        for name in ("ab_base", "ab_pairs", "ab_round_s"):
            state.option(name)
        from .ab.estimators import estimator  # lazy: heavy

        try:  # a name, not a parser's form: a conftest registers its estimator after the command line is read
            estimator(state.option("ab_estimator"))
        except ValueError as exc:
            raise S2STError(f"{state.source('ab_estimator')}: {exc}") from None
    except S2STError as exc:
        raise pytest.UsageError(str(exc)) from None
    from .plugin_versions import configure as code_versions  # lazy: plugin load

    code_versions(config, state)  # --s2st-ab-base's controller, or a worker it started
    from .plugin_history import configure as history  # lazy: plugin load

    history(config, state)  # --s2st-history: the session's rows appended to the results database
    if _xdist_distributes(config):  # -n N: workers time, the controller merges (plugin_xdist.py)
        from .plugin_xdist import XdistGlue  # lazy: plugin load

        config.pluginmanager.register(XdistGlue(config), "s2st-xdist")


def _xdist_distributes(config: pytest.Config) -> bool:
    """An xdist worker, or a controller that starts workers (-n N with N > 0)."""
    if hasattr(config, "workerinput"):
        return True
    return bool(config.pluginmanager.hasplugin("xdist") and getattr(config.option, "dist", "no") != "no"
                and getattr(config.option, "tx", None))


def _case_of(item: pytest.Item) -> Any:
    callspec = getattr(item, "callspec", None)
    return callspec.params.get("s2st_case") if callspec is not None else None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """--s2st-shard i/n keeps its slice of the cases; under xdist a case's tests form one group."""
    shard = session_of(config).option("shard")
    if shard:
        from .distribute import shard_partition  # lazy: plugin load

        def key(item: pytest.Item) -> str:  # a case's tests stay together; other tests by nodeid
            case = _case_of(item)
            return f"case {case.case_id}" if case is not None else f"test {item.nodeid}"

        kept, dropped = shard_partition(items, key, *shard)
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = kept
    if config.pluginmanager.hasplugin("xdist"):
        for item in items:
            case = _case_of(item)
            level_part = "s2st_level_part" in getattr(getattr(item, "callspec", None), "params", {})
            if case is not None and not level_part:  # --dist loadgroup: each case on one worker, its model loaded
                item.add_marker(pytest.mark.xdist_group(case.case_id))  # once; level parts go to N workers


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    state = config.stash.get(SESSION_KEY, None)
    if state is None or not state.cases:
        return None
    return [f"s2st: {len(state.cases)} case(s): {', '.join(c.case_id for c in state.cases)}"]


def _no_speech_case(metafunc: pytest.Metafunc, cases: list[Any], needs_level: bool) -> None:
    """A service benchmark with no case that serves speech: one skipped item that says why."""
    from .pipelines.base import speech_types  # lazy: plugin load

    reason = (f"no configured case serves speech from text ({', '.join(c.case_id for c in cases)} do not); "
              f"add a {'/'.join(speech_types())} case or mark the test s2st_models(...)")
    skip = pytest.mark.skip(reason=reason)
    if needs_level:
        metafunc.parametrize(["s2st_case", "s2st_concurrency"], [pytest.param(None, None, marks=skip)],
                             ids=["no-speech-case"], indirect=["s2st_case"], scope="session")
    else:
        metafunc.parametrize("s2st_case", [pytest.param(None, marks=skip)], ids=["no-speech-case"],
                             indirect=True, scope="session")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    names = set(metafunc.fixturenames)
    needs_case, needs_level = bool(S2ST_FIXTURES & names), "s2st_concurrency" in names
    if not (needs_case or needs_level):
        return
    state = session_of(metafunc.config)
    if not needs_case:
        levels = state.option("concurrency")
        metafunc.parametrize("s2st_concurrency", levels, ids=[f"c{c}" for c in levels], scope="session")
        _level_parts(metafunc, state, [(None, c) for c in levels])
        return
    marker = metafunc.definition.get_closest_marker("s2st_models")
    # --s2st-endpoint without a config: the external server is the service benchmarks' ONE case, named from it
    external = state.external_case() if "s2st_service" in names and not marker else None
    try:
        cases = [external] if external is not None else state.load_cases()
    except S2STError as exc:
        raise pytest.UsageError(str(exc)) from None
    if external is None:
        _warn_embedded_default(metafunc, state, cases)
    if marker:
        wanted = {str(a) for a in marker.args}
        cases = [c for c in cases if c.model_type in wanted or c.case_id in wanted]
    elif "s2st_service" in names and external is None:  # a service benchmark: the cases a speech service can serve
        serving = [c for c in cases if c.serves_speech]
        if not serving and cases:
            _no_speech_case(metafunc, cases, needs_level)
            return
        cases = serving
    if not needs_level:
        metafunc.parametrize("s2st_case", cases, ids=[c.case_id for c in cases], indirect=True, scope="session")
        return
    # each case brings its own levels (general.concurrency), so case and level are parametrized together
    pairs = [(c, level) for c in cases for level in c.settings["concurrency"]]
    metafunc.parametrize(["s2st_case", "s2st_concurrency"], pairs, ids=[f"{c.case_id}-c{level}" for c, level in pairs],
                         indirect=["s2st_case"], scope="session")
    _level_parts(metafunc, state, pairs)


class S2STDefaultCasesWarning(UserWarning):
    """A test of the user's own project runs on the embedded demo cases because no config was given."""


OWN_BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"  # this repository's: the default is theirs


def _warn_embedded_default(metafunc: pytest.Metafunc, state: S2STSession, cases: list[Any]) -> None:
    """No --s2st-config (nor ini s2st_config): a test outside this repository's benchmarks/ would silently
    benchmark the embedded demo cases; say so once per test function, in pytest's warnings summary."""
    if state.config.getoption("s2st_config") or state.ini("s2st_config"):
        return
    path = Path(str(metafunc.definition.path)).resolve()
    if path.is_relative_to(OWN_BENCHMARKS):
        return
    metafunc.definition.warn(S2STDefaultCasesWarning(
        f"{metafunc.definition.name} runs on the {len(cases)} embedded demo case(s) "
        f"({', '.join(c.case_id for c in cases)}), not on your model: no --s2st-config (nor ini s2st_config) "
        f"was given. Pass --s2st-config YOUR.yaml, or benchmark your own callable without a config: "
        f"s2st_benchmark(my_model, inputs)"))


def _check_level_parts(state: S2STSession, pairs: list[tuple[Any, int]]) -> None:
    """S2STError naming the flag (or ini key), the case and its config when N does not divide a level."""
    from .service.parts import part_concurrency  # lazy: plugin load

    count = state.option("level_parts")
    for case, level in pairs:
        part_concurrency(level, count, f"{state.source('level_parts')} {count}"
                         + (f" (case {case.case_id}, {case.config.path})" if case is not None else ""))


def _level_parts(metafunc: pytest.Metafunc, state: S2STSession, pairs: list[tuple[Any, int]]) -> None:
    """--s2st-level-parts N > 1: every service level becomes N items [...-c<level>-p<k>of<N>] (plugin_service
    drives part k with concurrency level/N); a level N does not divide is a usage error, named once."""
    count = state.option("level_parts")
    if count <= 1 or "s2st_load" not in metafunc.fixturenames:
        return
    from .service.parts import part_id  # lazy: plugin load

    try:
        _check_level_parts(state, pairs)
    except S2STError as exc:  # checked where a service test asks for levels: its module's one-line error
        raise pytest.Collector.CollectError(str(exc)) from None
    ids = [part_id(k, count) for k in range(1, count + 1)]
    metafunc.fixturenames.append("s2st_level_part")  # a parameter only, as pytest-repeat adds its step number
    metafunc.parametrize("s2st_level_part", ids, ids=ids)


@pytest.fixture(scope="session")
def s2st_case(request: pytest.FixtureRequest):
    """The benchmark case (config + resolved settings) this test is parametrized with; on xdist
    worker gwK a cuda/npu case runs on device K mod the count."""
    case = request.param
    state = session_of(request.config)
    if case is not None and state.worker:
        case.settings["device"] = state.pin_device(case.settings["device"])
    return case


@pytest.fixture(scope="session")
def s2st_pipeline(s2st_case, request: pytest.FixtureRequest):
    """The case's pipeline, loaded once per session."""
    from .measure.memory import settled_rss_mib  # lazy: plugin load
    from .pipelines.base import build_pipeline  # lazy: plugin load

    versions = session_of(request.config).code_versions
    if versions is not None and versions.controller:  # --s2st-ab-base: the workers build it, each in its tree
        yield None
        return
    # the case's start: its RSS rise (rss_rise_mib) counts from here, its model's load included
    session_of(request.config).case_start_rss[s2st_case.case_id] = settled_rss_mib()
    try:
        pipeline = build_pipeline(s2st_case.model_type, s2st_case.config.stages,
                                  device=s2st_case.device().name, config_path=s2st_case.config.path,
                                  config_lines=s2st_case.config.lines)
    except S2STError as exc:
        fail(exc)
    except SystemExit as exc:  # no Exception: the factory's own guard lets it through
        from .pipelines.callable import user_frame  # lazy: plugin load

        at = user_frame(exc)
        fail(f"{s2st_case.config.path}: building the case's pipeline called sys.exit({show(repr(exc.code), 60)})"
             f"{f' at {show(at)}' if at else ''}")
    yield pipeline
    pipeline.close()


@pytest.fixture(scope="session")
def s2st_dataset(s2st_case):
    """The case's samples (npy, raw or text), dataset_size applied (here, and only here)."""
    try:
        return s2st_case.samples(str(s2st_case.config.path))
    except S2STError as exc:
        fail(exc)


@pytest.fixture
def s2st_benchmark(request: pytest.FixtureRequest, benchmark):
    """Call as ``s2st_benchmark(model, inputs)``: measures runtime, memory and FLOPs of every stage.
    ``s2st_benchmark(model, inputs, baseline=other)``: an in-process A/B -- ``other`` measured too and timed in
    rounds alternating with ``model``'s (ABBA), the row carrying the paired candidate/baseline ratio.

    ``model``: your own callable (one input in, one output out) or ``s2st_pipeline``; ``inputs``: a list, an
    array (one input per row), any iterable of inputs, or ``s2st_dataset`` (dataset_size already applied).
    No config is needed for your own callable: the row is named after the test.
    """
    return S2STBenchmark(request, benchmark)  # plugin_benchmark.py


PROGRESS_WRITER_KEY = pytest.StashKey["Any"]()


def _install_progress(config: pytest.Config) -> None:
    """Long phases of the core (progress.phase: a valgrind count, a service level, a first model build) write a
    line every 10 s to the terminal, between the test's own output; none under -q."""
    from . import progress  # lazy: plugin load

    tr_name, cap_name = "terminalreporter", "capturemanager"

    def write(line: str) -> None:
        tr = config.pluginmanager.get_plugin(tr_name)
        if tr is None or config.get_verbosity() < 0:
            return
        capman = config.pluginmanager.get_plugin(cap_name)
        with capman.global_and_fixture_disabled() if capman else contextlib.nullcontext():
            tr.ensure_newline()
            tr.write_line(line)

    config.stash[PROGRESS_WRITER_KEY] = write
    progress.install(write)


def pytest_unconfigure(config: pytest.Config) -> None:
    writer = config.stash.get(PROGRESS_WRITER_KEY, None)
    if writer is not None:
        from . import progress  # lazy: plugin load

        progress.remove(writer)


def _item_facts(item: pytest.Item) -> Any:
    """What the test brings to its verdict (outcome.GATES): its markers' keywords, what it measured, the limits."""
    from .outcome import ItemFacts  # lazy: plugin load

    measurement = item.stash.get(MEASUREMENT_KEY, None)
    gate = item.get_closest_marker("s2st_gate")
    facts = ItemFacts(item.nodeid, [m.kwargs for m in item.iter_markers("s2st_budget")],
                      gate.kwargs if gate is not None else None, measurement, item.stash.get(SERVICE_KEY, None))
    if measurement is not None:
        facts.compare_fail = session_of(item.config).option("compare_fail") or ()
        facts.compare_saved = bool(item.config.getoption("benchmark_compare", None))
    return facts


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    from .budget import parse_budget  # lazy: plugin load
    from .measure.memory import current_rss_mib, settled_rss_mib  # lazy: plugin load

    # before its fixtures: a test's own model counts in its RSS rise (garbage collected only where it is measured)
    item.stash[START_RSS_KEY] = settled_rss_mib() if "s2st_benchmark" in item.fixturenames else current_rss_mib()

    for marker in item.iter_markers("s2st_budget"):
        try:
            parse_budget(marker.kwargs, item.nodeid)
        except S2STError as exc:
            fail(exc)
    gate = item.get_closest_marker("s2st_gate")
    if gate is not None:
        try:
            if gate.args:
                raise S2STError(f"{gate_where(item)}: s2st_gate takes keyword arguments only, got {len(gate.args)} "
                                "positional")
            gate_policy(None, gate.kwargs, gate_where(item))  # its own keys, named as the test file's
        except S2STError as exc:
            fail(exc)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    if report.when != "call":
        return
    if not report.passed:
        if item.stash.get(MEASUREMENT_KEY, None) is not None:
            report.s2st_verdict = "ERROR"
        return
    measurement = item.stash.get(MEASUREMENT_KEY, None)
    if measurement is not None and measurement.baseline is not None:
        from .judging import ab_change  # lazy: plugin load

        change = ab_change(measurement.to_dict())
        if change is not None:  # the evidence travels with the report: -rA, --report-log; junitxml's properties
            evidence = f"runtime candidate/baseline: {change.describe()}"
            report.sections.append(("s2st A/B", evidence))
            item.user_properties.append(("s2st_ab", evidence))  # junitxml reads the teardown report's
    from .outcome import item_verdict  # lazy: plugin load

    verdict = item_verdict(_item_facts(item))
    if verdict is not None:
        session_of(item.config).record_verdict(item, report, verdict)


def pytest_report_teststatus(report: pytest.TestReport, config: pytest.Config):
    if report.when == "call" and report.passed and getattr(report, "s2st_verdict", None) == "INCONCLUSIVE":
        return "inconclusive", "I", ("INCONCLUSIVE", {"yellow": True})
    return None


@pytest.hookimpl(wrapper=True, optionalhook=True)
def pytest_benchmark_group_stats(config: pytest.Config, benchmarks: list, group_by: str):
    """pytest-benchmark's table leaves service levels out (the service table reports them; see
    benchmark_compat.without_service_levels); its saved JSON keeps them."""
    from .benchmark_compat import without_service_levels  # lazy: plugin load

    groups = yield
    kept, dropped = without_service_levels(groups)
    state = config.stash.get(SESSION_KEY, None)
    if state is not None:
        state.benchmark_rows_left_out = dropped
    return kept


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    state = session.config.stash.get(SESSION_KEY, None)
    if state is not None:
        state.finish(session)


@pytest.hookimpl(hookwrapper=True)
def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config):
    # after every other summary, and even when one raised: pytest-benchmark's --benchmark-compare-fail
    # raises PerformanceRegression from its summary, which would otherwise hide our tables and regressions
    try:
        yield
    finally:
        state = config.stash.get(SESSION_KEY, None)
        if state is not None:
            from .terminal import display  # lazy: plugin load

            display(state, terminalreporter)
