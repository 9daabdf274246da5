"""The service bench (pytest-free): reference-server lifecycle, run one level, judge one level.

The plugin's ``s2st_service`` / ``s2st_load`` fixtures and the ``s2st-assess`` command use these;
nothing here knows pytest. A run of one concurrency level writes its run directory once (runs.py),
and returns the level's data: what goes into the benchmark JSON and the service table.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ..errors import S2STError
from ..gate import score
from ..progress import count_lines, phase
from ..quality.verdict import INCONCLUSIVE, Verdict, assess
from ..runs import REQUESTS

SERVER_START_TIMEOUT_S = 300.0
SERVER_STOP_TIMEOUT_S = 15.0
CASE_FILE, IDENTITY_FILE, LOG_FILE = "case.json", "identity.json", "server.log"
Timed = Callable[[Callable[[], None]], None]  # runs fn, under a benchmark clock or not


@dataclass
class Service:
    endpoint: str
    identity: dict | None
    process: subprocess.Popen | None = None
    log_path: Path | None = None

    @property
    def external(self) -> bool:
        return self.process is None


def start_reference_server(case: Any, workdir: Path, timeout_s: float = SERVER_START_TIMEOUT_S) -> Service:
    """``s2st-serve`` in a subprocess, given the resolved case (never the raw YAML): every override
    pytest applied reaches the server, and its identity JSON says what it was given."""
    workdir.mkdir(parents=True, exist_ok=True)
    case_path, identity_path, log_path = workdir / CASE_FILE, workdir / IDENTITY_FILE, workdir / LOG_FILE
    case_path.write_text(json.dumps(case.to_dict(), indent=1, sort_keys=True), encoding="utf-8")
    cmd = [sys.executable, "-m", "pytest_s2st.cli.serve", "--case", str(case_path), "--port", "0",
           "--identity-output", str(identity_path)]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout_s
    with phase(f"starting the reference server for {case.case_id} (loads the model)", limit_s=timeout_s):
        _await_identity(case, proc, identity_path, log_path, deadline, timeout_s)
    identity = json.loads(identity_path.read_text())
    return Service(identity["endpoint"], identity, proc, log_path)


def _await_identity(case: Any, proc: subprocess.Popen, identity_path: Path, log_path: Path, deadline: float,
                    timeout_s: float) -> None:
    while not identity_path.exists():
        if proc.poll() is not None:
            lines = log_path.read_text(errors="replace").strip().splitlines()
            raise S2STError(f"{case.config.path}: reference server exited ({proc.returncode}): "
                            f"{lines[-1] if lines else 'no output'}")
        if time.monotonic() > deadline:
            proc.kill()
            raise S2STError(f"{case.config.path}: reference server not listening after {timeout_s:.0f} s "
                            f"(log: {log_path})")
        time.sleep(0.05)


EXTERNAL_PREFIX = "external-"
NAME_TIMEOUT_S = 5.0
_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def external_case_name(endpoint: str, timeout_s: float = NAME_TIMEOUT_S) -> tuple[str, str]:
    """The case id of an external endpoint benchmarked without a config, named from the server:
    ``external-<first id of GET /v1/models>``, else ``external-<case_id or model_type of GET /identity>``,
    else (no answer within ``timeout_s``) ``external-<host>-<port>``. Returns (case id, where the name came from)."""
    import asyncio  # lazy: plugin load

    from yarl import URL  # lazy: heavy

    from .server_facts import fetch_identity, fetch_model  # lazy: heavy

    url = URL(endpoint)

    async def ask() -> tuple[str | None, str]:
        model, where = await fetch_model(url, timeout_s)
        if model:
            return model, where
        identity, error = await fetch_identity(url, timeout_s)
        if isinstance(identity, dict):
            for key in ("case_id", "model_type"):
                if isinstance(identity.get(key), str) and identity[key].strip():
                    return identity[key], f"GET /identity ({key})"
        return None, f"{where}; {error or 'GET /identity: names no case_id or model_type'}"

    name, where = asyncio.run(ask())
    if name is None:
        name, where = f"{url.host}-{url.port}", f"the endpoint's host and port ({where})"
    cleaned = _NAME_UNSAFE.sub("-", name).strip("-.")[:80] or "server"
    return EXTERNAL_PREFIX + cleaned, where


def stop_service(service: Service) -> None:
    proc = service.process
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()  # SIGTERM: the server drains and exits
    try:
        proc.wait(timeout=SERVER_STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


def level_bound_s(settings: Mapping[str, Any], n_requests: int, concurrency: int) -> float:
    """The whole level is bounded: every request's timeout, `concurrency` at a time, plus slack."""
    from .arrivals import from_settings  # lazy: heavy

    timeout = float(settings["request_timeout"])
    span = from_settings(settings).span_s(n_requests)  # open loop: the schedule's length (n / rate seconds)
    return timeout * (settings["warmup"] + n_requests) / concurrency + timeout + 30 + span


def policy_extra(policy: Any) -> dict[str, Any]:
    """What a level saves about the frozen policy (the verdict refuses a run judged under another)."""
    return {"policy": policy.to_dict(), "policy_fingerprint": policy.fingerprint()} if policy is not None else {}


def run_level(service: Service, workload: list[dict], concurrency: int, out_dir: Path, settings: Mapping[str, Any],
              targets: dict | None, policy: Any, timed: Timed) -> tuple[Any, dict]:
    """One concurrency level against one service -> (LoadResult, level data). The load generator
    writes the level's summary.json once, with the policy; ``timed(fn)`` runs the load."""
    import asyncio  # lazy: plugin load

    from .client import run_load  # lazy: heavy
    from .options import LoadOptions  # lazy: heavy
    from .stats import METHODS  # lazy: heavy

    holder: dict[str, Any] = {}
    n = settings.get("requests") or len(workload)
    extra = policy_extra(policy)
    options = LoadOptions.from_settings(settings, total_timeout_s=level_bound_s(settings, n, concurrency),
                                        targets=targets, extra=extra)

    def once() -> None:
        holder["result"] = asyncio.run(run_load(service.endpoint, workload, concurrency, options, out_dir=out_dir))

    # a model's level takes minutes: a line every 10 s (requests done of warm-ups + measured, from requests.jsonl)
    with phase(f"service level {'/'.join(out_dir.parts[-3:])}", total=int(settings["warmup"]) + n,
               unit="requests", done=lambda: count_lines(out_dir / REQUESTS)):
        timed(once)
    result = holder["result"]
    identity = result.identity or service.identity
    data = {
        "concurrency": concurrency,
        "endpoint": result.endpoint,  # normalised: a base URL given by the user gains the default path
        "external": service.external,
        "streaming": bool((identity or {}).get("streaming", False)),
        "protocol": options.protocol,
        "evidence_dir": str(out_dir),
        "identity": identity,
        "summary": result.summary,
        "timed_out": result.timed_out,
        "unasked": result.unasked,
        "methods": _methods(METHODS, options.arrival, options.protocol),
        "failed": [{"id": r["id"], "error": r.get("error")} for r in result.measured if r.get("status") != "ok"],
        **extra,
    }
    return result, data


def _methods(methods: Mapping[str, str], arrival: Any, protocol: str) -> dict[str, str]:
    """How each number of a level was measured, for its protocol and load shape (its arrivals.Arrival)."""
    from .wire import PROTOCOLS  # lazy: heavy

    out = dict(methods)
    out["request_rate"] = arrival.describe()
    out["achieved_rate"] = ("measured requests sent (bytes handed to the socket) / wall seconds of the measured phase "
                            "(client clock)")
    if PROTOCOLS[protocol].ttfa_method:
        out["ttfa_s"] = PROTOCOLS[protocol].ttfa_method
    return out


def paired_order(levels: Sequence[int], concurrency: int) -> str:
    """AB (baseline first) or BA: alternates with the level so neither side always runs warm."""
    levels = list(levels)
    return "AB" if concurrency not in levels or levels.index(concurrency) % 2 == 0 else "BA"


def run_paired(candidate: Callable[[], tuple[Any, dict]], baseline: Callable[[], tuple[Any, dict]],
               order: str) -> tuple[Any, dict, dict]:
    """Candidate and baseline of one level in the given order -> (candidate result, its data, baseline data)."""
    if order == "AB":
        _, base = baseline()
        result, data = candidate()
    else:
        result, data = candidate()
        _, base = baseline()
    data["order"] = base["order"] = order
    return result, data, base


def judge_level(policy: Any, baseline_dir: Path | None, candidate_dir: Path, quality: Mapping[str, Any] | None,
                scores_file: str | None) -> Any:
    """PASS / FAIL / INCONCLUSIVE of one candidate level against its baseline (after the load, untimed)."""
    if baseline_dir is None:
        return Verdict(INCONCLUSIVE, ["no baseline: set quality.baseline, --s2st-baseline or --benchmark-compare"])
    try:
        scores = score(policy, baseline_dir, candidate_dir, quality, scores_file)
        return assess(baseline_dir, candidate_dir, policy, scores)
    except S2STError as exc:
        return Verdict(INCONCLUSIVE, [str(exc)])


def evidence_reasons(data: Mapping[str, Any]) -> list[str]:
    """Missing evidence of a level -> reasons for INCONCLUSIVE (failed requests, a run cut short)."""
    reasons = [f"{f['id']}: request failed: {f['error']}" for f in data.get("failed", [])]
    reasons += data.get("unasked") or []
    if data.get("timed_out"):
        reasons.append("the run hit its time bound before every request finished")
    if not data["summary"].get("n_ok"):
        reasons.append("no request completed: no TTFA/RTF to report")
    return reasons


def gate_verdict(data: Mapping[str, Any]) -> Any:
    """The gate's saved verdict of a level, or None when no gate ran."""
    gate = data.get("gate")
    if not gate:
        return None
    return Verdict(gate["status"], list(gate.get("reasons") or []), speedup=gate.get("speedup"))
