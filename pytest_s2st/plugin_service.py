"""pytest glue for service benchmarks: the reference server as a fixture, the load generator, the service table.

    def test_service(s2st_service, s2st_workload, s2st_concurrency, s2st_load):
        s2st_load(s2st_service, s2st_workload, concurrency=s2st_concurrency)

Registered as its own pytest11 entry point; shares the session state of pytest_s2st.plugin.
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from .errors import S2STError
from .plugin import _fail, _session

SERVICE_KEY = pytest.StashKey["Any"]()
SERVER_START_TIMEOUT_S = 300.0


@dataclass
class Service:
    endpoint: str
    identity: dict | None
    process: subprocess.Popen | None = None
    log_path: Path | None = None

    @property
    def external(self) -> bool:
        return self.process is None


def _start_reference_server(case, workdir: Path) -> Service:
    identity_path = workdir / "identity.json"
    log_path = workdir / "server.log"
    cmd = [sys.executable, "-m", "pytest_s2st.cli.serve", "--s2st-config", str(case.config.path), "--port", "0",
           "--identity-output", str(identity_path), "--device", case.settings["device"],
           "--threads", str(case.settings["threads"])]
    log = open(log_path, "wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    log.close()
    deadline = time.monotonic() + SERVER_START_TIMEOUT_S
    while not identity_path.exists():
        if proc.poll() is not None:
            lines = log_path.read_text(errors="replace").strip().splitlines()
            raise S2STError(f"{case.config.path}: reference server exited ({proc.returncode}): "
                            f"{lines[-1] if lines else 'no output'}")
        if time.monotonic() > deadline:
            proc.kill()
            raise S2STError(f"{case.config.path}: reference server not listening after {SERVER_START_TIMEOUT_S:.0f} s "
                            f"(log: {log_path})")
        time.sleep(0.05)
    identity = json.loads(identity_path.read_text())
    return Service(identity["endpoint"], identity, proc, log_path)


def _stop(service: Service) -> None:
    proc = service.process
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()  # SIGTERM: the server drains and exits
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


@pytest.fixture(scope="session")
def s2st_service(request: pytest.FixtureRequest, s2st_case, tmp_path_factory):
    """The endpoint under test: the reference server around the case's pipeline, or --s2st-endpoint."""
    state = _session(request.config)
    endpoint = state.option("endpoint")
    if endpoint:
        yield Service(endpoint, None)
        return
    workdir = tmp_path_factory.mktemp(f"server-{s2st_case.case_id}")
    try:
        service = _start_reference_server(s2st_case, workdir)
    except S2STError as exc:
        _fail(exc)
    yield service
    _stop(service)


@pytest.fixture(scope="session")
def s2st_workload(s2st_case):
    """The case's workload items ({id, text, language, voice, seed}); default: the shipped 12 sentences."""
    from .service.workload import load_workload

    path = s2st_case.config.general.get("workload") or s2st_case.settings.get("workload")
    try:
        return load_workload(path)
    except S2STError as exc:
        _fail(exc)


def _evidence_root(config: pytest.Config) -> Path:
    state = _session(config)
    if state.evidence_root is None:
        base = Path(state.option("evidence_dir"))
        if not base.is_absolute():
            base = config.rootpath / base
        stamp = time.strftime("%Y%m%d-%H%M%S")
        state.evidence_root = Path(tempfile.mkdtemp(prefix=f"{stamp}-", dir=_mkdir(base)))
    return state.evidence_root


def _mkdir(path: Path) -> Path:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise pytest.UsageError(f"--s2st-evidence-dir {path}: cannot create it: {exc.strerror or exc}") from None
    return path


def _load_level(service: Service, workload: list[dict], concurrency: int, out_dir: Path, settings: dict,
                targets: dict | None, policy, timed) -> tuple[Any, dict]:
    """One concurrency level against one service; ``timed(fn)`` runs fn under the benchmark clock."""
    import asyncio

    from .service.client import run_load
    from .service.evidence import write_summary
    from .service.stats import METHODS

    holder: dict[str, Any] = {}
    timeout = float(settings["request_timeout"])
    n = settings.get("requests") or len(workload)
    # the whole level is bounded: every request's timeout, run `concurrency` at a time, plus slack
    bound = timeout * (settings["warmup"] + n) / concurrency + timeout + 30

    def once():
        holder["result"] = asyncio.run(run_load(
            service.endpoint, workload, concurrency, out_dir=out_dir, warmups=settings["warmup"],
            timeout_s=timeout, total_timeout_s=bound, requests=settings.get("requests"), targets=targets))

    timed(once)
    result = holder["result"]
    identity = result.identity or service.identity
    data = {
        "concurrency": concurrency,
        "endpoint": service.endpoint,
        "external": service.external,
        "streaming": bool((identity or {}).get("streaming", False)),
        "evidence_dir": str(out_dir),
        "identity": identity,
        "summary": result.summary,
        "timed_out": result.timed_out,
        "methods": dict(METHODS),
        "failed": [{"id": r["id"], "error": r.get("error")} for r in result.measured if r.get("status") != "ok"],
    }
    extra = {"policy": policy.to_dict(), "policy_fingerprint": policy.fingerprint()} if policy is not None else None
    if extra:
        data.update(extra)
    write_summary(out_dir, result.summary, concurrency=concurrency, endpoint=service.endpoint, identity=identity, extra=extra)
    return result, data


def _resolve_quality(case) -> dict:
    """The config's quality section with its paths resolved against the YAML's folder."""
    quality = dict(case.config.quality or {}) if case is not None else {}
    for key in ("baseline", "anchors", "asr_model_dir"):
        value = quality.get(key)
        if isinstance(value, str) and value and not Path(value).expanduser().is_absolute():
            quality[key] = str(case.config.path.parent / value)
    return quality


def _baseline_service(request: pytest.FixtureRequest, config_path: str):
    """A same-session baseline: its case and reference server, started once and stopped at the end."""
    from .cases import load_case

    state = _session(request.config)
    cache = state.baselines
    if config_path not in cache:
        case = load_case(config_path, state.explicit, state.ini)
        workdir = Path(tempfile.mkdtemp(prefix=f"server-baseline-{case.case_id}-"))
        service = _start_reference_server(case, workdir)
        request.config.add_cleanup(lambda: _stop(service))
        cache[config_path] = (case, service)
    return cache[config_path]


@pytest.fixture
def s2st_load(request: pytest.FixtureRequest, benchmark):
    """``s2st_load(service, workload, concurrency=N)``: warm-ups, then the measured requests; returns the LoadResult.

    With a quality policy (config ``quality:`` / ``@pytest.mark.s2st_gate``) the run is the candidate,
    judged against its baseline after the load (scoring never runs inside the timed region).
    """
    from .gate import baseline_from_compare, gate_policy, level_dir, score
    from .quality.verdict import INCONCLUSIVE, Verdict, assess

    state = _session(request.config)
    case = request.getfixturevalue("s2st_case") if "s2st_case" in request.fixturenames else None
    settings = case.settings if case else {name: state.option(name) for name in
                                          ("warmup", "requests", "request_timeout")}
    case_id = case.case_id if case else request.node.name
    quality = _resolve_quality(case)
    marker = request.node.get_closest_marker("s2st_gate")
    where = str(case.config.path) + " (quality)" if case else request.node.nodeid
    try:
        policy = gate_policy(quality, marker.kwargs if marker else None, where)
    except S2STError as exc:
        _fail(exc)
    if marker and marker.args:
        _fail(f"{request.node.nodeid}: s2st_gate takes keyword arguments only")

    def run(service: Service, workload: list[dict], concurrency: int):
        root = _evidence_root(request.config)
        targets = case.config.general.get("targets") if case else None  # goodput: {ttfa_s: x, rtf: y}
        if targets is not None and (not isinstance(targets, dict) or not set(targets) <= {"ttfa_s", "rtf"} or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in targets.values())):
            _fail(f"{case.config.where('general.targets')}: targets must map ttfa_s and/or rtf to numbers > 0, "
                  f"got {targets!r}")

        def timed(fn):
            benchmark.pedantic(fn, rounds=1, iterations=1, warmup_rounds=0)

        def untimed(fn):
            fn()

        def candidate():
            return _load_level(service, workload, concurrency, level_dir(root, case_id, concurrency), settings,
                               targets, policy, timed)

        baseline_data = None
        try:
            if policy is not None and quality.get("baseline"):
                base_case, base_service = _baseline_service(request, quality["baseline"])
                # each candidate gets its own paired baseline runs
                base_dir = level_dir(root / case_id, f"baseline-{base_case.case_id}", concurrency)

                def baseline():
                    return _load_level(base_service, workload, concurrency, base_dir, base_case.settings, targets,
                                       policy, untimed)

                # paired AB/BA: the order alternates with the level so neither side always runs warm
                levels = list(case.settings["concurrency"]) if case else [concurrency]
                ab = levels.index(concurrency) % 2 == 0 if concurrency in levels else True
                if ab:
                    _, baseline_data = baseline()
                    result, data = candidate()
                else:
                    result, data = candidate()
                    _, baseline_data = baseline()
                baseline_data.update(case=base_case.case_id, role="baseline", order="AB" if ab else "BA")
                data["order"] = "AB" if ab else "BA"
            else:
                result, data = candidate()
        except S2STError as exc:
            _fail(exc)
        data["case"] = case_id
        if policy is not None:
            if baseline_data is not None:
                base_dir = Path(baseline_data["evidence_dir"])
            elif state.option("baseline"):
                base_dir = level_dir(state.option("baseline"), case_id, concurrency)
            else:
                base_dir = baseline_from_compare(getattr(getattr(request.config, "_benchmarksession", None),
                                                         "compared_mapping", None), request.node.nodeid)
            if base_dir is None:
                verdict = Verdict(INCONCLUSIVE, ["no baseline: set quality.baseline, --s2st-baseline or --benchmark-compare"])
            else:
                try:
                    scores = score(policy, base_dir, Path(data["evidence_dir"]), quality, state.option("quality"))
                    verdict = assess(base_dir, data["evidence_dir"], policy, scores)
                except S2STError as exc:
                    verdict = Verdict(INCONCLUSIVE, [str(exc)])
                data["baseline_dir"] = str(base_dir)
            data["gate"] = verdict.to_dict()
        benchmark.extra_info["s2st_service"] = data
        request.node.stash[SERVICE_KEY] = data
        if baseline_data is not None:
            state.service_results.append((_Named(f"{request.node.name} (baseline {baseline_data['case']})"), baseline_data))
        state.service_results.append((request.node, data))
        return result

    return run


class _Named:
    """Stands in for an item in the service table (a baseline row has no test of its own)."""

    def __init__(self, name: str):
        self.name = name


def gate_verdict(data: dict):
    from .quality.verdict import Verdict

    gate = data.get("gate")
    if not gate:
        return None
    return Verdict(gate["status"], list(gate.get("reasons") or []), speedup=gate.get("speedup"))


def service_evidence_reasons(data: dict) -> list[str]:
    """Missing evidence of a service run -> reasons for INCONCLUSIVE (failed requests, a run cut short)."""
    reasons = [f"{f['id']}: request failed: {f['error']}" for f in data.get("failed", [])]
    if data.get("timed_out"):
        reasons.append("the run hit its time bound before every request finished")
    if not data["summary"].get("n_ok"):
        reasons.append("no request completed: no TTFA/RTF to report")
    return reasons


def render_service_table(results) -> list[str]:
    from .report import fmt_seconds, table

    def pct(block: dict, key: str, fmt) -> str:
        value = (block or {}).get(key)
        return "n/a" if value is None else fmt(value)

    header = ["Name", "conc", "ok/n", "TTFA mean", "p50", "p90", "p99", "RTF mean", "p50", "p90", "p99",
              "latency p50", "p99", "throughput", "errors", "goodput"]
    body = []
    for item, data in results:
        s = data["summary"]
        ttfa, rtf, lat = s.get("ttfa_s") or {}, s.get("rtf") or {}, s.get("latency_s") or {}
        rtf_fmt = lambda v: f"{v:.3f}"
        goodput = (s.get("goodput") or {}).get("fraction")
        body.append([
            item.name, str(data["concurrency"]), f"{s.get('n_ok', 0)}/{s.get('n', 0)}",
            *(pct(ttfa, k, fmt_seconds) for k in ("mean", "p50", "p90", "p99")),
            *(pct(rtf, k, rtf_fmt) for k in ("mean", "p50", "p90", "p99")),
            pct(lat, "p50", fmt_seconds), pct(lat, "p99", fmt_seconds),
            "n/a" if s.get("throughput") is None else f"{s['throughput']:.2f} s/s",
            "n/a" if s.get("error_rate") is None else f"{100 * s['error_rate']:.1f}%",
            "n/a" if goodput is None else f"{100 * goodput:.0f}%",
        ])
    return table(header, body)
