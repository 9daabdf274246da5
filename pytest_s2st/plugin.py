"""pytest glue: options with ini twins, markers, parametrization, fixtures, verdicts, extra table, compare.

Knows pytest, knows no model. Importing this module must stay cheap: no torch, fairseq or
qwen_tts here; the core modules that need them are imported inside fixtures.
"""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest

from .errors import S2STError
from .gate import gate_help, gate_signature
from .metrics import budget_signature
from .session import MEASUREMENT_KEY, SERVICE_KEY, SESSION_KEY, S2STSession, fail, session_of
from .settings import SETTINGS, argparse_type

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


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    # one plugin: this module brings the service fixtures along, so `-p no:s2st` disables both (they were a second
    # pytest11 entry point, which `-p no:s2st` left registered); `-p no:s2st_service` still drops the service part.
    # An install from before that change still has the second entry point: it then finds the name taken and skips.
    name, module = SERVICE_PLUGIN
    if pluginmanager.get_plugin(name) is None and not pluginmanager.is_blocked(name):
        import importlib

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
    from .settings import BY_NAME

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
    from .benchmark_compat import narrow_columns

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
            from .tiny.cache import cache_root

            cache_root()
        for name in ("ab_base", "ab_pairs", "ab_round_s"):
            state.option(name)
    except S2STError as exc:
        raise pytest.UsageError(str(exc)) from None
    from .plugin_versions import configure as code_versions

    code_versions(config, state)  # --s2st-ab-base's controller, or a worker it started
    from .plugin_history import configure as history

    history(config, state)  # --s2st-history: the session's rows appended to the results database
    if _xdist_distributes(config):  # -n N: workers time, the controller merges (plugin_xdist.py)
        from .plugin_xdist import XdistGlue

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
        from .distribute import shard_partition

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
    from .pipelines.base import speech_types

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
    from .service.parts import part_concurrency

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
    from .service.parts import part_id

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
    from .measure.memory import settled_rss_mib
    from .pipelines.base import build_pipeline

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
        from .inputs import show
        from .pipelines.callable import user_frame

        at = user_frame(exc)
        fail(f"{s2st_case.config.path}: building the case's pipeline called sys.exit({show(repr(exc.code), 60)})"
             f"{f' at {show(at)}' if at else ''}")
    yield pipeline
    pipeline.close()


@pytest.fixture(scope="session")
def s2st_dataset(s2st_case):
    """The case's samples (npy, raw or text), dataset_size applied (here, and only here)."""
    from .datasets import load_dataset

    path = s2st_case.config.general.get("dataset_path")
    if path is None:
        fail(f"{s2st_case.config.path}: no dataset: set general.dataset_path or --s2st-dataset-path")
    try:
        return load_dataset(path, s2st_case.settings["dataset_type"], s2st_case.settings["dataset_size"],
                            sample_rate=int(s2st_case.config.general.get("sample_rate", 16000)))
    except S2STError as exc:
        fail(exc)


def _run_settings(request: pytest.FixtureRequest, case: Any) -> tuple[dict, Any]:
    """(settings, RunSettings) of an s2st_benchmark call: the case's, else the session's."""
    from .runner import RunSettings

    state = session_of(request.config)
    settings = case.settings if case else {s.name: state.option(s.name) for s in SETTINGS}
    try:
        if case is not None:
            device = case.device()
        else:
            from .measure.device import resolve_device

            device = resolve_device(state.pin_device(settings["device"]))
    except S2STError as exc:
        fail(exc)
    child = case is not None and (settings["instructions"] != "off" or settings["isolate"])  # rebuilds the case
    return settings, RunSettings.from_settings(settings, device=device, fill_time=state.fill_time,
                                               case=case.to_dict() if child else None)


def _dump(measurement: Any, case: Any, dump_dir: str) -> None:
    from .dump import dump_waveforms
    from .runs import safe_name

    general = case.config.general if case else {}
    speech = [o for o in measurement.outputs if isinstance(o, dict) and "waveform" in o]
    if speech:
        try:
            dump_waveforms(speech, Path(dump_dir) / safe_name(measurement.case_id),
                           str(general.get("dump_waveform_file_prefix", "")), general.get("target_sr"))
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
    from .benchmark_compat import fixture_timer, pedantic_until, save_case_ids, timer_name
    from . import progress
    from .runner import Measurement, measure_pipeline

    save_case_ids(benchmark)
    state = session_of(request.config)
    case = request.getfixturevalue("s2st_case") if "s2st_case" in request.fixturenames else None

    def run(pipeline, dataset, *, baseline=None, references=None) -> Measurement:
        if state.benchmark_refusals:
            fail(state.benchmark_refusals[0])
        versions = state.code_versions
        if versions is not None:  # pytest-benchmark times nothing here: its "fixture was not used" does not apply
            benchmark._mode = "s2st: timed by the code-version A/B"
        if versions is not None and versions.controller:  # both sides measured in the workers (plugin_versions)
            measurement = versions.compare(request.node)
            measurement.info["identity"] = f"{request.node.path.name}::{request.node.name}"
            state.add_measurement(request.node, measurement)
            benchmark.extra_info["s2st"] = measurement.to_dict()
            return measurement
        if versions is not None:
            baseline = None  # a code-version worker times its own tree's model; the other side is the baseline
        from .datasets import inputs_from
        from .pipelines.callable import from_function, is_pipeline

        where = f"{request.node.nodeid}: s2st_benchmark(model, inputs)"
        # --s2st-isolate re-creates in a child what the test benchmarks: the case's pipeline from the case,
        # anything else (the test's own callable) from its pickle
        own = case is None or "s2st_pipeline" not in request.fixturenames \
            or pipeline is not request.getfixturevalue("s2st_pipeline")
        benchmarked, benchmarked_baseline = pipeline, baseline
        try:
            if not is_pipeline(pipeline):
                pipeline = from_function(pipeline, where)
            if baseline is not None and not is_pipeline(baseline):
                baseline = from_function(baseline, f"{request.node.nodeid}: s2st_benchmark(..., baseline=)")
            dataset = inputs_from(dataset, where)
            if references is not None:
                if not own:
                    raise S2STError(f"{where}: references= scores your own callable's outputs; the case's pipeline "
                                    "takes its references from the config (general.references)")
                from .gate import given_references

                references = given_references(references, len(dataset), where)
        except S2STError as exc:
            fail(exc)
        settings, run_settings = _run_settings(request, case)
        if own and run_settings.isolate:
            run_settings.isolate_model = benchmarked
        if own and run_settings.instructions != "off":  # the valgrind child re-creates it from its pickle
            run_settings.instructions_model = benchmarked
        if run_settings.instructions != "off" and benchmarked_baseline is not None and (  # an A/B's baseline, likewise
                case is None or "s2st_pipeline" not in request.fixturenames
                or benchmarked_baseline is not request.getfixturevalue("s2st_pipeline")):
            run_settings.instructions_baseline = benchmarked_baseline
        if not own and case.case_id in state.case_start_rss:  # the case's pipeline: its start is before its build
            run_settings.start_rss_mib = state.case_start_rss[case.case_id]
        else:  # the test's own callable: what the test built counts, from the start of its setup
            run_settings.start_rss_mib = request.node.stash.get(START_RSS_KEY, None)
            run_settings.start_what = "before the test's setup"
        measurement = Measurement(case.case_id if case else request.node.name, pipeline.model_type)
        if case is not None:
            measurement.info["config"] = str(case.config.path)
        # what compare matches on: independent of the rootdir (see report.identity)
        measurement.info["identity"] = f"{request.node.path.name}::{request.node.name}"
        if state.worker:
            measurement.info["xdist_worker"] = state.worker
        state.add_measurement(request.node, measurement)

        def drive(rounds) -> str:
            rounds.timer = timer = fixture_timer(benchmark)  # stage clocks share pytest-benchmark's timer
            if versions is not None:  # the controller orders each round (versions/worker.py)
                versions.serve(request.node, rounds)
                return timer_name(timer)
            # pedantic's loop, as many rounds as the policy says (a count, or until --s2st-target-precision is
            # reached); pytest-benchmark records each round as our stage clocks timed it, so its table and ours
            # hold the same numbers (benchmark_compat.pedantic_until)
            pedantic_until(benchmark, rounds.run, rounds.setup, rounds.more, timed=rounds.last_round_s)
            return timer_name(timer)

        try:
            # a slow model's passes take minutes: a line every 10 s (one write from another thread, outside no clock
            # that matters: the timed rounds are per sample, the line costs microseconds)
            with state.timing_turn(), progress.phase(f"measuring {measurement.case_id} (warm-up, timing, memory and "
                                                     "FLOPs passes)"):
                measure_pipeline(pipeline, dataset, run_settings, case_id=measurement.case_id,
                                 drive_timing=drive, measurement=measurement, baseline=baseline,
                                 progress=_progress_writer(request.config, measurement.case_id))
        except S2STError as exc:  # a model's own one-line refusal (e.g. too few frames for Griffin-Lim)
            fail(exc)
        if references is not None:
            _given_translation(request, case, references, measurement)
        elif case is not None:
            _translation(request, state, case, dataset, measurement, pipeline)
        benchmark.extra_info["s2st"] = measurement.to_dict()
        if versions is not None:
            versions.measured(request.node, benchmark.extra_info["s2st"])
        if settings.get("dump_dir"):
            _dump(measurement, case, settings["dump_dir"])
        return measurement

    return run


def _translation(request: pytest.FixtureRequest, state: S2STSession, case: Any, samples: list,
                 measurement: Any, pipeline: Any = None) -> None:
    """BLEU/chrF of the case's translations and ASR-BLEU/ASR-chrF of its output speech against its references
    (after every pass, never timed) into the row; with translation thresholds in the frozen policy, the gate's
    verdict (measurement.gate)."""
    from .gate import gate_policy
    from .measure.record import Metric
    from .quality.translation import judge_translation, translation_keys
    from .quality.verdict import Verdict

    where = str(case.config.path)
    marker = request.node.get_closest_marker("s2st_gate")
    try:
        scores = case_translation_scores(case, samples, [s.name for s in measurement.stages],
                                         measurement.stage_outputs, pipeline, where)
        # the marker's own keys were checked at setup (named as the test file's); what is left is the merge
        policy = gate_policy(case.config.quality, marker.kwargs if marker else None,
                             f"{where} (quality)" + (f" with {gate_where(request.node)}" if marker else ""))
    except S2STError as exc:
        fail(exc)
    measurement.quality.update({name: Metric.from_dict(m) for name, m in scores.items() if not m.get("absent")})
    if policy is None or not translation_keys(policy):
        return
    base_path = (case.config.quality or {}).get("baseline")
    baseline = None
    if base_path:
        try:
            baseline = _translation_baseline(state, str(base_path))
        except S2STError as exc:
            fail(exc)
    status, reasons, metrics = judge_translation(policy, scores, baseline, str(base_path or ""))
    measurement.gate = Verdict(status, reasons, {"translation": metrics})
    measurement.info["translation_gate"] = {"status": status, "reasons": reasons, "metrics": metrics,
                                            "baseline": str(base_path) if base_path else None,
                                            "policy": policy.to_dict(), "policy_fingerprint": policy.fingerprint()}


def _given_translation(request: pytest.FixtureRequest, case: Any, references: list, measurement: Any) -> None:
    """s2st_benchmark(fn, inputs, references=[...]): BLEU/chrF of the callable's text outputs into the row and,
    with translation thresholds in the policy (the s2st_gate marker over a case's quality: section), the verdict.
    Drop thresholds need a baseline's scores, which a callable has not: INCONCLUSIVE with the reason."""
    from .gate import gate_policy, given_reference_scores
    from .measure.record import Metric
    from .quality.translation import judge_translation, translation_keys
    from .quality.verdict import Verdict

    settings = case.settings if case is not None else {"bleu_tokenize": session_of(request.config).option("bleu_tokenize")}
    scores = given_reference_scores([s.name for s in measurement.stages], measurement.stage_outputs, references,
                                    settings.get("bleu_tokenize"))
    measurement.quality.update({name: Metric.from_dict(m) for name, m in scores.items()})
    marker = request.node.get_closest_marker("s2st_gate")
    quality = case.config.quality if case is not None else None
    try:
        policy = gate_policy(quality, marker.kwargs if marker else None,
                             f"{case.config.path} (quality)" if case is not None else gate_where(request.node))
    except S2STError as exc:
        fail(exc)
    if policy is None or not translation_keys(policy):
        return
    status, reasons, metrics = judge_translation(policy, scores, None)
    reasons = [r.replace("(quality.baseline)", "(a callable's references= give no baseline scores)") for r in reasons]
    measurement.gate = Verdict(status, reasons, {"translation": metrics})
    measurement.info["translation_gate"] = {"status": status, "reasons": reasons, "metrics": metrics,
                                            "baseline": None, "references": "s2st_benchmark(references=)",
                                            "policy": policy.to_dict(), "policy_fingerprint": policy.fingerprint()}


def case_translation_scores(case: Any, samples: list, names: list, outputs: list, pipeline: Any, where: str) -> dict:
    """Every translation metric of a case's outputs (Metric dicts): BLEU/chrF of its last text stage, ASR-BLEU/
    ASR-chrF of its final speech; a metric it could not score carries the reason (value None)."""
    from .quality.scorers import asr_backend
    from .quality.translation import (SPEECH_METRICS, TEXT_METRICS, measure_speech, measure_translation,
                                      missing_metrics, no_scores_reason, target_language)

    general = case.config.general
    references = general.get("references")
    finder = getattr(pipeline, "reference_decoder", None)
    decode = finder() if callable(finder) else None
    asr_dir = (case.config.quality or {}).get("asr_model_dir")
    tokenize = case.settings.get("bleu_tokenize") or "13a"  # resolved by load_case (auto: by target language)
    scores = measure_translation(samples, names, outputs, references, where, decode, tokenize)
    scores.update(measure_speech(samples, names, outputs, references, where,
                                 target_language(general, case.config.stages),
                                 lambda lang: asr_backend(lang, asr_dir), decode, tokenize))
    for kind, speech in ((TEXT_METRICS, False), (SPEECH_METRICS, True)):  # why not, for a gate that needs them
        if not any(name in scores for name in kind):
            scores.update({name: dict(m, absent=True) for name, m in missing_metrics(
                kind, no_scores_reason(samples, names, outputs, references, where, decode, speech)).items()})
    return scores


def _translation_baseline(state: S2STSession, path: str) -> dict:
    """The translation metrics of a quality.baseline config: its row when this session measured it, else
    its pipeline run untimed on its own dataset (once per session)."""
    if path in state.translation_baselines:
        return state.translation_baselines[path]
    for _item, measured in state.results:
        if measured.info.get("config") == path and measured.quality:
            state.translation_baselines[path] = {k: m.to_dict() for k, m in measured.quality.items()}
            return state.translation_baselines[path]
    from .datasets import load_dataset
    from .pipelines.base import build_pipeline
    from .quality.translation import run_outputs

    case = state.load_extra_case(path)
    general = case.config.general
    if general.get("dataset_path") is None:
        raise S2STError(f"{path} (quality.baseline): no dataset: set general.dataset_path")
    samples = load_dataset(general["dataset_path"], case.settings["dataset_type"], case.settings["dataset_size"],
                           sample_rate=int(general.get("sample_rate", 16000)))
    pipeline = build_pipeline(case.model_type, case.config.stages, device=case.device().name,
                              config_path=case.config.path, config_lines=case.config.lines)
    try:
        names, outputs = run_outputs(pipeline, samples)
        scores = case_translation_scores(case, samples, names, outputs, pipeline, f"{path} (quality.baseline)")
    finally:
        pipeline.close()
    state.translation_baselines[path] = {k: m for k, m in scores.items() if not m.get("absent")}
    return state.translation_baselines[path]


PROGRESS_WRITER_KEY = pytest.StashKey["Any"]()


def _install_progress(config: pytest.Config) -> None:
    """Long phases of the core (progress.phase: a valgrind count, a service level, a first model build) write a
    line every 10 s to the terminal, between the test's own output; none under -q."""
    from . import progress

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
        from . import progress

        progress.remove(writer)


def _progress_writer(config: pytest.Config, case_id: str):
    """Progress of long datasets on the terminal, between the test's own output (capture suspended; through the
    writer _install_progress installed, so one line at a time and none under -q)."""
    if config.get_verbosity() < 0:
        return None
    from . import progress

    def report(stage: str, phase: str, done: int, total: int) -> None:
        progress.write(f"s2st [{case_id}] {stage}: {phase} {done}/{total}")

    return report


def _item_verdict(item: pytest.Item):
    """Budgets and evidence of one test -> the worst verdict (FAIL > INCONCLUSIVE > PASS), or None."""
    from .budget import FAIL, INCONCLUSIVE, PASS, Verdict, check_budget, parse_budget, service_lookup
    from .service.bench import evidence_reasons, gate_verdict

    measurement = item.stash.get(MEASUREMENT_KEY, None)
    service = item.stash.get(SERVICE_KEY, None)
    verdicts = []
    for marker in item.iter_markers("s2st_budget"):
        limits, stage = parse_budget(marker.kwargs, item.nodeid)
        if measurement is not None:
            verdicts.append(check_budget(measurement.metric, limits, stage, [s.name for s in measurement.stages]))
        elif service is not None and service.get("level_part"):
            continue  # one part of a level (--s2st-level-parts): budgets judge the merged level, on its merger
        elif service is not None:
            verdicts.append(check_budget(service_lookup(service), limits))
        else:
            verdicts.append(Verdict(INCONCLUSIVE, ["s2st_budget set but the test measured nothing "
                                                   "(call s2st_benchmark or s2st_load)"]))
    if measurement is not None and getattr(measurement, "gate", None) is not None:
        verdicts.append(measurement.gate)  # translation thresholds of the frozen policy (_translation)
    elif measurement is not None and service is None and item.get_closest_marker("s2st_gate") is not None:
        verdicts.append(Verdict(INCONCLUSIVE, [_unjudged_gate(item, measurement)]))  # never a silent pass
    if service is not None:  # parts_reasons: a level split by --s2st-level-parts not driven as asked
        reasons = list(service.get("parts_reasons") or []) + (evidence_reasons(service) if "summary" in service else [])
        verdicts.append(Verdict(INCONCLUSIVE, reasons) if reasons else Verdict(PASS))
        gate = gate_verdict(service)
        if gate is not None:
            verdicts.append(gate)
    if measurement is not None and measurement.baseline is not None:
        verdicts += _ab_verdict(item, measurement)
    elif measurement is not None:
        verdicts += _unmeasured_verdict(item, measurement)
    if not verdicts:
        return None
    order = {FAIL: 0, INCONCLUSIVE: 1, PASS: 2}
    worst = min(verdicts, key=lambda v: order[v.status])
    reasons = [r for v in verdicts if v.status != PASS for r in v.reasons]
    # a speedup is reported only when everything passed
    speedup = next((v.speedup for v in verdicts if v.speedup), None) if worst.status == PASS else None
    return Verdict(worst.status, reasons, speedup=speedup)


def _unjudged_gate(item: pytest.Item, measurement: Any) -> str:
    """Why an s2st_gate marker on an s2st_benchmark test judged nothing."""
    marker = item.get_closest_marker("s2st_gate")
    keys = ", ".join(f"{k}={v!r}" for k, v in marker.kwargs.items())
    if "config" not in measurement.info and not measurement.quality:  # s2st_benchmark(fn, inputs): no references
        why = ("s2st_benchmark(model, inputs) of your own callable has no references to score: pass "
               "references=[...], one reference translation per input (docs/writing.md), or benchmark a config "
               "case with general.references (docs/quality.md)")
    else:
        why = "no translation score it names was measured for this case (its other keys judge service benchmarks)"
    return f"s2st_gate({keys}) not judged: {why}"


def _ab_verdict(item: pytest.Item, measurement: Any) -> list[Any]:
    """An in-process A/B under --s2st-compare-fail: FAIL past a limit, INCONCLUSIVE where one could not be
    checked; without limits the A/B is reported, not judged."""
    from .budget import FAIL, INCONCLUSIVE, PASS, Verdict
    from .report import ab_limits

    missing = measurement.info.get("ab", {}).get("missing")
    if missing:  # a code-version A/B where a side measured nothing: never a pass
        return [Verdict(INCONCLUSIVE, [f"no A/B verdict: {missing}"])]
    limits = session_of(item.config).option("compare_fail")
    if not limits:
        return []
    crossed, unchecked = ab_limits(measurement.to_dict(), limits)
    return [Verdict(FAIL, crossed) if crossed else Verdict(PASS)] + ([Verdict(INCONCLUSIVE, unchecked)] if unchecked else [])


def _unmeasured_verdict(item: pytest.Item, measurement: Any) -> list[Any]:
    """--benchmark-compare with --s2st-compare-fail: a limit on a metric this run could not measure (instructions
    of a lambda, FLOPs turned off) is INCONCLUSIVE, one line per limit with the metric's reason, on this test --
    not a pass followed by "not checked" in the session's regressions, which leave it out."""
    from .budget import INCONCLUSIVE, Verdict
    from .report import unmeasured_limits

    limits = session_of(item.config).option("compare_fail")
    if not limits or not item.config.getoption("benchmark_compare", None):
        return []
    reasons = unmeasured_limits(measurement.to_dict()["metrics"], limits)
    return [Verdict(INCONCLUSIVE, reasons)] if reasons else []


START_RSS_KEY = pytest.StashKey[float]()  # item -> the process's RSS (MiB) when its setup began


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    from .budget import parse_budget
    from .measure.memory import current_rss_mib, settled_rss_mib

    # before its fixtures: a test's own model counts in its RSS rise (garbage collected only where it is measured)
    item.stash[START_RSS_KEY] = settled_rss_mib() if "s2st_benchmark" in item.fixturenames else current_rss_mib()

    for marker in item.iter_markers("s2st_budget"):
        try:
            parse_budget(marker.kwargs, item.nodeid)
        except S2STError as exc:
            fail(exc)
    gate = item.get_closest_marker("s2st_gate")
    if gate is not None:
        from .gate import gate_policy

        try:
            if gate.args:
                raise S2STError(f"{gate_where(item)}: s2st_gate takes keyword arguments only, got {len(gate.args)} "
                                "positional")
            gate_policy(None, gate.kwargs, gate_where(item))  # its own keys, named as the test file's
        except S2STError as exc:
            fail(exc)


def gate_where(item: pytest.Item) -> str:
    """'test_x.py:12 (s2st_gate of test_name)': where a marker's bad keyword was written."""
    path, line, _ = item.location
    return f"{path}:{(line or 0) + 1} (s2st_gate of {getattr(item, 'originalname', item.name)})"


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
        from .report import ab_change

        change = ab_change(measurement.to_dict())
        if change is not None:  # the evidence travels with the report: -rA, --report-log; junitxml's properties
            evidence = f"runtime candidate/baseline: {change.describe()}"
            report.sections.append(("s2st A/B", evidence))
            item.user_properties.append(("s2st_ab", evidence))  # junitxml reads the teardown report's
    verdict = _item_verdict(item)
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
    from .benchmark_compat import without_service_levels

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
            state.display(terminalreporter)
