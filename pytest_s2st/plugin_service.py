"""pytest glue for service benchmarks: thin fixtures over the pytest-free service bench.

    def test_service(s2st_service, s2st_workload, s2st_concurrency, s2st_load):
        s2st_load(s2st_service, s2st_workload, concurrency=s2st_concurrency)

Registered as its own pytest11 entry point; shares the session object (session.py) with plugin.py.
"""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest

from .errors import S2STError
from .runs import level_dir, safe_name
from .service.bench import Service, start_reference_server, stop_service
from .session import fail, session_of


@pytest.fixture(scope="session")
def s2st_service(request: pytest.FixtureRequest, s2st_case, tmp_path_factory):
    """The endpoint under test: the reference server around the case's pipeline, or --s2st-endpoint."""
    endpoint = session_of(request.config).option("endpoint")
    if endpoint:
        yield Service(endpoint, None)
        return
    workdir = tmp_path_factory.mktemp(f"server-{safe_name(s2st_case.case_id)}")
    try:
        service = start_reference_server(s2st_case, workdir)
    except S2STError as exc:
        fail(exc)
    yield service
    stop_service(service)


@pytest.fixture(scope="session")
def s2st_workload(s2st_case):
    """The case's workload items ({id, text, language, voice, seed}); default: the shipped 12 sentences."""
    from .service.workload import load_workload

    path = s2st_case.config.general.get("workload") or s2st_case.settings.get("workload")
    try:
        return load_workload(path)
    except S2STError as exc:
        fail(exc)


def _baseline_service(request: pytest.FixtureRequest, config_path: str) -> tuple[Any, Service]:
    """A same-session baseline: its case and reference server, started once and stopped at the end."""
    state = session_of(request.config)
    if config_path not in state.baselines:
        case = state.load_extra_case(config_path)
        workdir = Path(tempfile.mkdtemp(prefix=f"server-baseline-{safe_name(case.case_id)}-"))
        service = start_reference_server(case, workdir)
        request.config.add_cleanup(lambda: stop_service(service))
        state.baselines[config_path] = (case, service)
    return state.baselines[config_path]


def _gate_policy(request: pytest.FixtureRequest, case: Any) -> Any:
    from .gate import gate_policy

    marker = request.node.get_closest_marker("s2st_gate")
    if marker and marker.args:
        fail(f"{request.node.nodeid}: s2st_gate takes keyword arguments only")
    where = f"{case.config.path} (quality)" if case else request.node.nodeid
    try:
        return gate_policy(case.config.quality if case else None, marker.kwargs if marker else None, where)
    except S2STError as exc:
        fail(exc)


def _test_name(request: pytest.FixtureRequest) -> str:
    """The test function's name without parameters: several service tests of one case and level
    each get their own run directory."""
    return getattr(request.node, "originalname", None) or request.node.name


def _baseline_dir(request: pytest.FixtureRequest, case_id: str, concurrency: int, paired: dict | None) -> Path | None:
    """Where the gate's baseline evidence is: the paired run, --s2st-baseline, or the compared run's."""
    from .benchmark_compat import compared_mapping
    from .gate import baseline_from_compare

    state = session_of(request.config)
    if paired is not None:
        return Path(paired["evidence_dir"])
    if state.option("baseline"):
        return level_dir(state.option("baseline"), case_id, concurrency, _test_name(request))
    return baseline_from_compare(compared_mapping(request.config), request.node.nodeid)


@pytest.fixture
def s2st_load(request: pytest.FixtureRequest, benchmark):
    """``s2st_load(service, workload, concurrency=N)``: warm-ups, then the measured requests; returns the LoadResult.

    With a quality policy (config ``quality:`` / ``@pytest.mark.s2st_gate``) the run is the candidate,
    judged against its baseline after the load (scoring never runs inside the timed region).
    """
    from .service.bench import judge_level, paired_order, run_level, run_paired

    state = session_of(request.config)
    case = request.getfixturevalue("s2st_case") if "s2st_case" in request.fixturenames else None
    settings = case.settings if case else {name: state.option(name) for name in
                                          ("warmup", "requests", "request_timeout", "max_audio_s")}
    case_id = case.case_id if case else request.node.name
    quality = (case.config.quality if case else None) or {}  # resolved by the config loader
    targets = case.config.general.get("targets") if case else None  # goodput {ttfa_s, rtf}: checked by the loader
    policy = _gate_policy(request, case)

    def timed(fn):
        benchmark.pedantic(fn, rounds=1, iterations=1, warmup_rounds=0)

    def run(service: Service, workload: list[dict], concurrency: int):
        try:
            root = state.evidence_root()
        except S2STError as exc:
            fail(exc)
        cand_dir = level_dir(root, case_id, concurrency, _test_name(request))
        baseline_data = None
        try:
            if policy is not None and quality.get("baseline"):
                base_case, base_service = _baseline_service(request, quality["baseline"])
                base_dir = level_dir(cand_dir.parent, f"baseline-{base_case.case_id}", concurrency)
                result, data, baseline_data = run_paired(
                    lambda: run_level(service, workload, concurrency, cand_dir, settings, targets, policy, timed),
                    lambda: run_level(base_service, workload, concurrency, base_dir, base_case.settings, targets,
                                      policy, lambda fn: fn()),
                    paired_order(case.settings["concurrency"] if case else [concurrency], concurrency))
                baseline_data.update(case=base_case.case_id, role="baseline")
            else:
                result, data = run_level(service, workload, concurrency, cand_dir, settings, targets, policy, timed)
        except S2STError as exc:
            fail(exc)
        data["case"] = case_id
        if policy is not None:
            base_dir = _baseline_dir(request, case_id, concurrency, baseline_data)
            verdict = judge_level(policy, base_dir, cand_dir, quality, state.option("quality"))
            if base_dir is not None:
                data["baseline_dir"] = str(base_dir)
            data["gate"] = verdict.to_dict()
        benchmark.extra_info["s2st_service"] = data
        state.add_service_level(request.node, data, baseline_data)
        return result

    return run
