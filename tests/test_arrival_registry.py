"""The arrival-process registry as an extension point: a ramp process (rate rising linearly) defined and registered
here, chosen through the request_rate setting's NAME:K=V spelling, drives a real level against the loopback
server; the due times its records keep follow the ramp. Nothing outside this file knows the ramp.

No clock is asserted (the due times are the schedule's, not measured), so this module runs in parallel."""
from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest

from loopback import server_thread
from pytest_s2st import runs
from pytest_s2st.cases import settings_from_json, settings_to_json
from pytest_s2st.errors import S2STError
from pytest_s2st.report_service import _rates
from pytest_s2st.service import arrivals
from pytest_s2st.service.arrivals import ARRIVALS, Arrival, register_arrival
from pytest_s2st.service.bench import Service, level_bound_s, run_level
from pytest_s2st.service.client import run_load
from pytest_s2st.service.options import LoadOptions
from pytest_s2st.service.synthesizers import demo_tone_synthesizer
from pytest_s2st.settings import BY_NAME

RAMP_METHOD = "rate rising linearly from start to end req/s over the schedule; request i due when start*t + " \
              "(end-start)*t^2/(2T) reaches i+1"


@dataclass(frozen=True)
class Ramp(Arrival):
    """Rate r(t) = start + (end - start) t / T over T = count / mean seconds: the expected count by t is
    N(t) = start t + (end - start) t^2 / (2T), and request i is due when N(t) = i + 1."""
    name: ClassVar[str] = "test-ramp"
    method: ClassVar[str] = RAMP_METHOD
    rate_fields: ClassVar[tuple[str, ...]] = ("start", "end")
    start: float = 1.0
    end: float = 10.0

    def mean_rate(self) -> float:
        return (self.start + self.end) / 2

    def schedule(self, count: int) -> list[float]:
        span = count / self.mean_rate()
        a = (self.end - self.start) / (2 * span)
        due = np.arange(1, count + 1, dtype=float)
        if a == 0:
            return [float(x) for x in due / self.start]
        return [float(x) for x in (-self.start + np.sqrt(self.start ** 2 + 4 * a * due)) / (2 * a)]

    def checked(self) -> "Ramp":
        for key in ("start", "end"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
                raise ValueError(f"ramp {key} must be requests per second > 0, got {value!r}")
        return dataclasses.replace(self, start=float(self.start), end=float(self.end))


@pytest.fixture
def ramp():
    """The ramp, registered for this test only (the registry is the process's: leave it as found)."""
    register_arrival(Ramp)
    try:
        yield Ramp
    finally:
        ARRIVALS.pop("test-ramp", None)


SETTINGS = {"warmup": 1, "request_timeout": 10.0, "requests": 24, "max_audio_s": None, "protocol": "s2st",
            "extra_body": None, "sample_rate": None, "burstiness": 1.0}


def test_a_level_driven_by_a_ramp_registered_here(ramp, tmp_path):
    rate = BY_NAME["request_rate"].parse("test-ramp:start=20,end=100")  # the settings parser gives the object
    assert rate == Ramp(20.0, 100.0) and str(rate) == "test-ramp:start=20,end=100"
    settings = {**SETTINGS, "request_rate": rate}
    # a case's settings are saved as JSON and read back (xdist workers, server processes): the process survives
    assert settings_from_json(json.loads(json.dumps(settings_to_json(settings))))["request_rate"] == rate
    out = tmp_path / "c4"
    with server_thread(demo_tone_synthesizer(seconds_per_char=0.001)) as base:
        result, data = run_level(Service(base, None), [{"id": "a", "text": "hi", "seed": 0}], 4, out, settings,
                                 None, None, lambda fn: fn())

    measured = sorted(result.measured, key=lambda r: r["index"])
    assert [r["status"] for r in measured] == ["ok"] * 24
    offsets = rate.schedule(24)
    # the due times kept are the ramp's schedule from the phase's start
    assert [r["due_t"] - measured[0]["due_t"] for r in measured] == pytest.approx(
        [o - offsets[0] for o in offsets], abs=1e-9)
    assert all(r["due_t"] is None for r in result.records if r["warmup"])  # warm-ups stay closed-loop
    # ... and they ramp: the last lands on count / mean rate, the gaps shrink, and the instantaneous rate
    # (1 / gap) rises linearly in time from ~start to ~end
    assert offsets[-1] == pytest.approx(24 / 60.0, rel=1e-12)
    due = np.asarray([r["due_t"] for r in measured]) - measured[0]["due_t"] + offsets[0]
    gaps = np.diff(due)
    assert np.all(np.diff(gaps) < 0)
    mid = (due[1:] + due[:-1]) / 2
    slope, intercept = np.polyfit(mid, 1 / gaps, 1)
    assert slope == pytest.approx((100 - 20) / offsets[-1], rel=0.05)
    assert intercept == pytest.approx(20, rel=0.1)
    assert np.max(np.abs(1 / gaps - (slope * mid + intercept))) < 1.0  # linear: within 1 req/s everywhere

    # what the level says about its load: the process's own entry keys, its methods line, the asked rate
    level = runs.read_summary(out)["by_concurrency"]["4"]
    assert {k: level[k] for k in (*arrivals.ARRIVAL_KEYS, "arrival")} == {
        "request_rate": 60.0, "burstiness": None, "arrival_seed": None, "arrivals_method": RAMP_METHOD,
        "arrival": "test-ramp:start=20,end=100"}
    assert data["methods"]["request_rate"] == f"open loop, test-ramp:start=20,end=100: {RAMP_METHOD}; the " \
                                              "concurrency cap still applies"
    assert result.summary["request_rate"] == 60.0 and _rates(result.summary)[0] == "60 req/s"
    # the level's time bound adds the schedule's span; level parts each take an even share of the ramp
    assert level_bound_s(settings, 24, 4) == pytest.approx(10.0 * 25 / 4 + 10.0 + 30 + 24 / 60.0)
    assert rate.split(2) == Ramp(10.0, 50.0)


def test_a_bad_ramp_is_one_line(ramp, tmp_path):
    with pytest.raises(ValueError, match="is not K=V of its parameters"):
        BY_NAME["request_rate"].parse("test-ramp:slope=3")
    with pytest.raises(S2STError) as e:
        import asyncio

        asyncio.run(run_load("http://127.0.0.1:9", [{"id": "a", "text": "hi"}], 1, out_dir=tmp_path,
                             arrival=Ramp(start=0.0)))
    assert str(e.value) == "run_load: ramp start must be requests per second > 0, got 0.0"
    assert not (tmp_path / runs.REQUESTS).exists()
    # LoadOptions carries the one object: a caller's extra may not overwrite the keys it writes
    with pytest.raises(S2STError, match="arrival are written by the load generator"):
        LoadOptions(arrival=Ramp(), extra={"arrival": "x"}).checked(1, ())


def test_unregistered_names_are_refused():
    with pytest.raises(ValueError, match="unknown arrival process 'test-ramp'; registered: .*gamma"):
        BY_NAME["request_rate"].parse("test-ramp:start=1")
    with pytest.raises(ValueError) as e:  # outside text in the line is cut and escaped
        BY_NAME["request_rate"].parse("x\n" * 3000 + ":a=1")
    assert len(str(e.value)) < 300 and "\n" not in str(e.value)


def test_a_parameter_given_twice_is_refused():
    with pytest.raises(ValueError, match="^arrival process gamma: rate is given twice$"):
        BY_NAME["request_rate"].parse("gamma:rate=1,rate=2")
