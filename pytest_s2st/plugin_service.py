"""pytest glue for service benchmarks: thin fixtures over the pytest-free service bench.

    def test_service(s2st_service, s2st_workload, s2st_concurrency, s2st_load):
        s2st_load(s2st_service, s2st_workload, concurrency=s2st_concurrency)

Registered by plugin.py as the plugin `s2st_service` (so `-p no:s2st` removes it too); shares the session
object (session.py) with plugin.py.
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
    from .benchmark_compat import save_case_ids
    from .service.bench import judge_level, paired_order, run_level, run_paired

    save_case_ids(benchmark)
    state = session_of(request.config)
    case = request.getfixturevalue("s2st_case") if "s2st_case" in request.fixturenames else None
    settings = case.settings if case else {name: state.option(name) for name in
                                          ("warmup", "requests", "request_timeout", "max_audio_s", "protocol",
                                           "extra_body", "sample_rate", "request_rate", "burstiness")}
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
        part = _level_part(request)
        if part is not None:  # --s2st-level-parts N: this item drives one part of the level
            return _run_part(request, part, service, workload, concurrency, cand_dir, settings, targets, policy,
                             case_id, timed, benchmark)
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
        budgets = _service_budgets(request)
        if budgets:  # the plot draws them
            data["budgets"] = budgets
        if state.worker:  # which xdist worker drove the level (one case's levels share one: loadgroup)
            data["xdist_worker"] = state.worker
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


def _service_budgets(request: pytest.FixtureRequest) -> dict[str, float]:
    """The service keywords of the test's s2st_budget markers (the closest marker wins); a bad marker is left to
    the verdict, which reports it in one line."""
    from .budget import parse_budget
    from .metrics import SERVICE_BUDGETS

    out: dict[str, float] = {}
    for marker in request.node.iter_markers("s2st_budget"):
        try:
            limits, _ = parse_budget(marker.kwargs, request.node.nodeid)
        except S2STError:
            continue
        for key, value in limits.items():
            if key in SERVICE_BUDGETS:
                out.setdefault(key, value)
    return out


def _level_part(request: pytest.FixtureRequest) -> tuple[int, int] | None:
    """(k, N) of an item parametrized by --s2st-level-parts N (id ``[<case>-c<level>-p<k>of<N>]``), else None."""
    from .service.parts import parse_part_id

    callspec = getattr(request.node, "callspec", None)
    value = callspec.params.get("s2st_level_part") if callspec is not None else None
    return parse_part_id(value) if isinstance(value, str) else None


def _run_part(request: pytest.FixtureRequest, part: tuple[int, int], service: Service, workload: list[dict],
              concurrency: int, level: Path, settings: Any, targets: Any, policy: Any, case_id: str, timed: Any,
              benchmark: Any) -> Any:
    """Part k of N of one level: rendezvous, its own load (c/N) into <level>/p<k>of<N>, then -- on the part
    that merges -- ONE level from the union of every part's records (service/parts.py).

    Under xdist the parts run on N workers at once: each waits (bounded by --s2st-level-parts-wait) until
    all N arrived, every part drives part 1's server, and part 1 waits for the others to finish and merges.
    Without workers (-n 0) the parts run one after another, without a rendezvous; the last one merges, and
    the level is INCONCLUSIVE: it was not driven at its concurrency."""
    import time

    from .service.bench import level_bound_s, run_level
    from .service.parts import (METHOD, mark, merge_parts, part_concurrency, part_id, release_at, rotate,
                                sleep_until, wait_for, write_merged)
    from .session import SERVICE_KEY

    state = session_of(request.config)
    index, count = part
    pid = part_id(index, count)
    if policy is not None:
        fail(f"{request.node.nodeid}: the quality gate judges whole levels from one client; it does not run "
             f"with {state.source('level_parts')} {count} (set it to 1 for gated tests)")
    try:
        sub = part_concurrency(concurrency, count, state.source("level_parts"))
    except S2STError as exc:
        fail(exc)
    wait = float(state.option("level_parts_wait"))
    concurrent = state.worker is not None
    part_settings = dict(settings)
    rate = float(settings.get("request_rate") or "inf")
    if rate != float("inf"):  # open loop: the level's rate, shared by its parts
        part_settings["request_rate"] = rate / count

    def not_driven(reasons: list[str], data: dict | None = None) -> None:
        stub = dict(data or {"concurrency": concurrency, "case": case_id})
        stub.update(level_part=pid, parts_reasons=reasons)
        request.node.stash[SERVICE_KEY] = stub
        benchmark.extra_info["s2st_service_part"] = stub

    try:
        if concurrent:
            from .service import client  # noqa: F401  -- imported before the rendezvous, not after it
            mark(level, index, count, "ready", {"worker": state.worker, "endpoint": service.endpoint,
                                                 "identity": service.identity, "external": service.external,
                                                 "wall": time.time()})
            ready, missing = wait_for(level, count, "ready", wait)
            if missing:
                not_driven([f"c{concurrency} part {pid}: {', '.join(missing)} did not arrive within {wait:g} s "
                            f"({state.source('level_parts_wait')}); the level was not driven"])
                return None
            leader = ready[1]
            if leader["endpoint"] != service.endpoint:  # every part loads the same server: part 1's
                service = Service(leader["endpoint"], leader.get("identity"))
            sleep_until(release_at(ready))
        result, data = run_level(service, rotate(workload, index, count), sub, level / pid, part_settings, targets,
                                 None, timed)
        data.update(case=case_id, level_part=pid, level_concurrency=concurrency)
        if state.worker:
            data["xdist_worker"] = state.worker
        mark(level, index, count, "done", data)
        merges = index == 1 if concurrent else index == count
        if not merges:
            request.node.stash[SERVICE_KEY] = data
            benchmark.extra_info["s2st_service_part"] = data
            return result
        n = settings.get("requests") or len(workload)
        done, missing = wait_for(level, count, "done", wait + level_bound_s(part_settings, n, sub) if concurrent
                                 else 0.0)
        if missing:
            why = (f"did not finish within {wait + level_bound_s(part_settings, n, sub):.0f} s" if concurrent
                   else "did not run before it in this session")
            not_driven([f"c{concurrency}: part(s) {', '.join(missing)} {why}; no merged level"], data)
            return result
        records, summary, facts = merge_parts([(part_id(k, count), level / part_id(k, count), sub)
                                               for k in range(1, count + 1)], targets)
    except S2STError as exc:
        fail(exc)
    from .service.client import set_rates

    set_rates(summary, records, summary["n"], summary["wall_s"], rate)  # requests sent, as one process counts them
    starts = [f["measured_start_s"] for f in facts]
    merged = {
        "concurrency": concurrency,
        "endpoint": data["endpoint"],
        "external": bool(data["external"]),
        "streaming": data["streaming"],
        "protocol": data["protocol"],
        "evidence_dir": str(level),
        "identity": data["identity"],
        "summary": summary,
        "timed_out": any(f["timed_out"] for f in facts),
        "methods": {**data["methods"], "level_parts": METHOD},
        "failed": [{"id": f"{part_id(k, count)}-{f['id']}", "error": f.get("error")}
                   for k in sorted(done) for f in done[k].get("failed") or []],
        "level_parts": count,
        "concurrent": concurrent,
        "start_spread_s": max(starts) - min(starts),
        "parts": [{**f, "xdist_worker": done[k].get("xdist_worker")} for k, f in zip(sorted(done), facts)],
        "case": case_id,
    }
    if not concurrent:
        merged["parts_reasons"] = [f"c{concurrency} ran as {count} parts of c{sub} one after another (no xdist "
                                   f"workers): it was not driven at concurrency {concurrency}; run with -n {count} "
                                   f"or more"]
    try:
        write_merged(level, records, summary, concurrency=concurrency, endpoint=data["endpoint"],
                     identity=data["identity"], extra={k: merged[k] for k in
                                                      ("level_parts", "concurrent", "start_spread_s", "parts")})
    except S2STError as exc:
        fail(exc)
    benchmark.extra_info["s2st_service"] = merged
    state.add_service_level(request.node, merged, name=request.node.name.replace(f"-{pid}]", "]"))
    return result
