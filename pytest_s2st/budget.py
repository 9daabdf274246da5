"""Budgets (``@pytest.mark.s2st_budget``) checked against a Measurement -> PASS / FAIL / INCONCLUSIVE."""
from __future__ import annotations

from typing import Any, Callable, Mapping

from .errors import S2STError
from .inputs import closest, finite, show
from .measure.record import Metric
from .quality.verdict import FAIL, INCONCLUSIVE, PASS, Verdict  # one verdict type for budgets and the gate
from .metrics import BUDGETS, BY_NAME, HIGHER, INFERENCE_BUDGETS, SERVICE_BUDGETS, service_value

Lookup = Callable[[str, "str | None"], "Metric | None"]


def parse_budget(kwargs: Mapping[str, Any], where: str) -> tuple[dict[str, float], str | None]:
    """Validate the marker's keywords: known metric names with numbers >= 0 (0 is a limit: "no underrun",
    "no error"), optional stage=."""
    limits: dict[str, float] = {}
    stage = None
    for key, value in kwargs.items():
        if key == "stage":
            stage = str(value)
            continue
        if key not in BUDGETS:
            raise S2STError(f"{where}: s2st_budget: unknown metric {show(repr(key))}"
                            f"{closest(key, list(BUDGETS) + ['stage'])}; "
                            f"known: {', '.join(BUDGETS)}, stage")
        number = finite(value)
        if number is None or number < 0:
            raise S2STError(f"{where}: s2st_budget: {key} must be a finite number >= 0, got {show(repr(value))}")
        limits[key] = number
    if not limits:
        raise S2STError(f"{where}: s2st_budget needs at least one limit ({', '.join(INFERENCE_BUDGETS)}, ...)")
    return limits, stage


def _fmt(value: float) -> str:
    return f"{value:.6g}"


def service_lookup(data: Mapping[str, Any]) -> Lookup:
    """Budget lookup over one s2st_load result (its summary), e.g. 'ttfa_s_p99' -> summary['ttfa_s']['p99']."""
    summary = data.get("summary") or {}

    def lookup(name: str, stage: str | None) -> Metric | None:
        if name not in SERVICE_BUDGETS:
            return None
        value = service_value(summary, name)
        method = "client time.perf_counter"
        if value is None:  # the metric's own reason first (e.g. no chunk timeline), then the level's
            reasons = summary.get("reasons") or {}
            why = reasons.get(SERVICE_BUDGETS[name][0]) or reasons.get("all")
            return Metric.missing(method, why or "no completed request to compute it from")
        return Metric(value, method)

    return lookup


def check_budget(lookup: Lookup, limits: Mapping[str, float], stage: str | None = None,
                 stages: list[str] | None = None) -> Verdict:
    failures, missing = [], []
    if stage is not None and stages is not None and stage not in stages:
        return Verdict(INCONCLUSIVE, [f"budget names stage {stage!r}, measured stages: {', '.join(stages)}"])
    scope = f" (stage {stage})" if stage else ""
    for name, limit in limits.items():
        metric = lookup(name, stage)
        value = finite(metric.value) if metric is not None else None
        if value is None:
            reason = metric.reason if metric is not None and metric.value is None else \
                "not measured" if metric is None else f"value {show(repr(metric.value))} is not a finite number"
            missing.append(f"{name}{scope}: no value to check against budget {_fmt(limit)} ({reason})")
        elif _higher_is_better(name) and value < limit:  # a floor: the budget is the least it may be
            failures.append(f"{name}{scope}: measured {_fmt(value)} < budget {_fmt(limit)} (higher is better; "
                            f"method {metric.method})")
        elif not _higher_is_better(name) and value > limit:
            failures.append(f"{name}{scope}: measured {_fmt(value)} > budget {_fmt(limit)} (method {metric.method})")
    if failures:
        return Verdict(FAIL, failures + missing)
    if missing:
        return Verdict(INCONCLUSIVE, missing)
    return Verdict(PASS, [])


def _higher_is_better(key: str) -> bool:
    """A budget keyword's metric ('ttfa_s_p99' -> ttfa_s) says which way is better (metrics.MetricDef.better)."""
    metric = SERVICE_BUDGETS[key][0] if key in SERVICE_BUDGETS else key
    return metric in BY_NAME and BY_NAME[metric].better == HIGHER
