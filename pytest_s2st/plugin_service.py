"""pytest glue for service benchmarks: thin fixtures over the pytest-free service bench.

    def test_service(s2st_service, s2st_workload, s2st_concurrency, s2st_load):
        s2st_load(s2st_service, s2st_workload, concurrency=s2st_concurrency)

Registered by plugin.py as the plugin `s2st_service` (so `-p no:s2st` removes it too); shares the session
object (session.py) with plugin.py.
"""
from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from .benchmark_compat import compared_mapping, save_case_ids
from .budget import parse_budget
from .errors import S2STError
from .gate import baseline_from_compare, gate_policy
from .metrics import SERVICE_BUDGETS
from .runs import level_dir, safe_name
from .service.bench import (Service, judge_level, level_bound_s, paired_order, run_level, run_paired,
                            start_reference_server, stop_service)
from .session import SERVICE_KEY, fail, session_of
from .workload import load_workload


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
    from .service.options import SETTING_NAMES  # lazy: heavy

    save_case_ids(benchmark)
    state = session_of(request.config)
    case = request.getfixturevalue("s2st_case") if "s2st_case" in request.fixturenames else None
    settings = case.settings if case else {name: state.option(name) for name in SETTING_NAMES}
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
        _service_row(benchmark, data)
        state.add_service_level(request.node, data, baseline_data)
        return result

    return run


def _service_budgets(request: pytest.FixtureRequest) -> dict[str, float]:
    """The service keywords of the test's s2st_budget markers (the closest marker wins); a bad marker is left to
    the verdict, which reports it in one line."""
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
    from .service.parts import parse_part_id  # lazy: plugin load

    callspec = getattr(request.node, "callspec", None)
    value = callspec.params.get("s2st_level_part") if callspec is not None else None
    return parse_part_id(value) if isinstance(value, str) else None


class _Part:
    """Part k of N of one level, as this item drives it: its id, its share of the load and how it meets the others."""

    def __init__(self, request: pytest.FixtureRequest, part: tuple[int, int], concurrency: int, level: Path,
                 settings: Any, case_id: str, benchmark: Any) -> None:
        from .service.arrivals import from_settings  # lazy: heavy
        from .service.parts import part_concurrency, part_id  # lazy: plugin load

        state = session_of(request.config)
        self.request, self.benchmark, self.state = request, benchmark, state
        self.index, self.count = part
        self.pid = part_id(self.index, self.count)
        self.concurrency, self.level, self.settings, self.case_id = concurrency, level, settings, case_id
        try:
            self.sub = part_concurrency(concurrency, self.count, state.source("level_parts"))
        except S2STError as exc:
            fail(exc)
        self.wait = float(state.option("level_parts_wait"))
        self.concurrent = state.worker is not None  # under xdist: the parts run at once on N workers
        self.arrival = from_settings(settings)  # the level's arrival process, its share run by each part
        self.part_settings = {**settings, "request_rate": self.arrival.split(self.count)}

    @property
    def merges(self) -> bool:
        """Part 1 merges when the parts run at once; the last one when they run one after another."""
        return self.index == 1 if self.concurrent else self.index == self.count

    def record(self, data: dict, key: str = "s2st_service_part") -> None:
        self.request.node.stash[SERVICE_KEY] = data
        self.benchmark.extra_info[key] = data

    def not_driven(self, reasons: list[str], data: dict | None = None) -> None:
        stub = dict(data or {"concurrency": self.concurrency, "case": self.case_id})
        stub.update(level_part=self.pid, parts_reasons=reasons)
        self.record(stub)


def _run_part(request: pytest.FixtureRequest, part: tuple[int, int], service: Service, workload: list[dict],
              concurrency: int, level: Path, settings: Any, targets: Any, policy: Any, case_id: str, timed: Any,
              benchmark: Any) -> Any:
    """Part k of N of one level: rendezvous, its own load (c/N) into <level>/p<k>of<N>, then -- on the part
    that merges -- ONE level from the union of every part's records (service/parts.py).

    Under xdist the parts run on N workers at once: each waits (bounded by --s2st-level-parts-wait) until
    all N arrived, every part drives part 1's server, and part 1 waits for the others to finish and merges.
    Without workers (-n 0) the parts run one after another, without a rendezvous; the last one merges, and
    the level is INCONCLUSIVE: it was not driven at its concurrency."""
    from .service.parts import merge_parts, part_id  # lazy: plugin load

    state = session_of(request.config)
    if policy is not None:
        fail(f"{request.node.nodeid}: the quality gate judges whole levels from one client; it does not run "
             f"with {state.source('level_parts')} {part[1]} (set it to 1 for gated tests)")
    p = _Part(request, part, concurrency, level, settings, case_id, benchmark)
    try:
        if p.concurrent:
            service = _rendezvous(p, service)
            if service is None:
                return None
        result, data = _drive_part(p, service, workload, targets, timed)
        if not p.merges:
            p.record(data)
            return result
        done = _await_parts(p, workload, data)
        if done is None:
            return result
        records, summary, facts = merge_parts([(part_id(k, p.count), level / part_id(k, p.count), p.sub)
                                               for k in range(1, p.count + 1)], targets)
    except S2STError as exc:
        fail(exc)
    merged = _merged_level(p, data, done, records, summary, facts)
    _write_merged_level(p, records, summary, merged)
    return result


def _rendezvous(p: _Part, service: Service) -> Service | None:
    """Under xdist: say this part is ready, wait (bounded) until all N are, and return the server every part drives
    (part 1's), at the common release instant; None when a part did not arrive (recorded as not driven)."""
    # lazy: heavy
    from .service import client  # noqa: F401  -- imported before the rendezvous, not after it
    from .service.parts import mark, release_at, sleep_until, wait_for  # lazy: plugin load

    mark(p.level, p.index, p.count, "ready", {"worker": p.state.worker, "endpoint": service.endpoint,
                                               "identity": service.identity, "external": service.external,
                                               "wall": time.time()})
    ready, missing = wait_for(p.level, p.count, "ready", p.wait)
    if missing:
        p.not_driven([f"c{p.concurrency} part {p.pid}: {', '.join(missing)} did not arrive within {p.wait:g} s "
                      f"({p.state.source('level_parts_wait')}); the level was not driven"])
        return None
    leader = ready[1]
    if leader["endpoint"] != service.endpoint:  # every part loads the same server: part 1's
        service = Service(leader["endpoint"], leader.get("identity"))
    sleep_until(release_at(ready))
    return service


def _drive_part(p: _Part, service: Service, workload: list[dict], targets: Any, timed: Any) -> tuple[Any, dict]:
    """This part's own load: its rotation of the workload at c/N into <level>/p<k>of<N>, then marked done."""
    from .service.parts import mark, rotate  # lazy: plugin load

    result, data = run_level(service, rotate(workload, p.index, p.count), p.sub, p.level / p.pid, p.part_settings,
                             targets, None, timed)
    data.update(case=p.case_id, level_part=p.pid, level_concurrency=p.concurrency)
    if p.state.worker:
        data["xdist_worker"] = p.state.worker
    mark(p.level, p.index, p.count, "done", data)
    return result, data


def _await_parts(p: _Part, workload: list[dict], data: dict) -> dict | None:
    """On the merging part: every part's done record (waited for, bounded, when they run at once); None when one is
    missing (recorded as not driven, no merged level)."""
    from .service.parts import wait_for  # lazy: plugin load

    n = p.settings.get("requests") or len(workload)
    done, missing = wait_for(p.level, p.count, "done", p.wait + level_bound_s(p.part_settings, n, p.sub)
                             if p.concurrent else 0.0)
    if missing:
        why = (f"did not finish within {p.wait + level_bound_s(p.part_settings, n, p.sub):.0f} s" if p.concurrent
               else "did not run before it in this session")
        p.not_driven([f"c{p.concurrency}: part(s) {', '.join(missing)} {why}; no merged level"], data)
        return None
    return done


def _merged_level(p: _Part, data: dict, done: dict, records: Any, summary: dict, facts: list[dict]) -> dict:
    """The merged level's service record: the union's summary (rates as one process counts them), the parts'
    facts, and why it is INCONCLUSIVE when the parts ran one after another."""
    from .service.record import set_rates  # lazy: heavy
    from .service.parts import METHOD, part_id  # lazy: plugin load

    set_rates(summary, records, summary["n"], summary["wall_s"], p.arrival)  # requests sent, as one process counts them
    starts = [f["measured_start_s"] for f in facts]
    merged = {
        "concurrency": p.concurrency,
        "endpoint": data["endpoint"],
        "external": bool(data["external"]),
        "streaming": data["streaming"],
        "protocol": data["protocol"],
        "evidence_dir": str(p.level),
        "identity": data["identity"],
        "summary": summary,
        "timed_out": any(f["timed_out"] for f in facts),
        "unasked": [f"{part_id(k, p.count)}: {line}" for k in sorted(done) for line in done[k].get("unasked") or []],
        "methods": {**data["methods"], "level_parts": METHOD},
        "failed": [{"id": f"{part_id(k, p.count)}-{f['id']}", "error": f.get("error")}
                   for k in sorted(done) for f in done[k].get("failed") or []],
        "level_parts": p.count,
        "concurrent": p.concurrent,
        "start_spread_s": max(starts) - min(starts),
        "parts": [{**f, "xdist_worker": done[k].get("xdist_worker")} for k, f in zip(sorted(done), facts)],
        "case": p.case_id,
    }
    if not p.concurrent:
        merged["parts_reasons"] = [f"c{p.concurrency} ran as {p.count} parts of c{p.sub} one after another (no "
                                   f"xdist workers): it was not driven at concurrency {p.concurrency}; run with "
                                   f"-n {p.count} or more"]
    return merged


def _service_row(benchmark: Any, data: dict) -> None:
    """The level on its pytest-benchmark row; its error rate also at the row's top (``extra_info.error_rate``,
    beside the time): a level whose requests fail fast is short, and a reader of the time alone (pytest-benchmark
    compare, github-action-benchmark) would call it fast."""
    benchmark.extra_info["s2st_service"] = data
    summary = data.get("summary") if isinstance(data.get("summary"), dict) else {}
    benchmark.extra_info["error_rate"] = summary.get("error_rate")
    benchmark.extra_info["requests_failed"] = summary.get("n_error")


def _write_merged_level(p: _Part, records: Any, summary: dict, merged: dict) -> None:
    """The merged level on disk (as one client's level) and in the session's service table."""
    from .service.parts import write_merged  # lazy: plugin load

    try:
        write_merged(p.level, records, summary, concurrency=p.concurrency, endpoint=merged["endpoint"],
                     identity=merged["identity"], extra={k: merged[k] for k in
                                                         ("level_parts", "concurrent", "start_spread_s", "parts")})
    except S2STError as exc:
        fail(exc)
    _service_row(p.benchmark, merged)
    p.state.add_service_level(p.request.node, merged, name=p.request.node.name.replace(f"-{p.pid}]", "]"))
