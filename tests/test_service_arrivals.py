"""Open-loop arrivals: the schedule's statistics against known truths, its determinism, its parsers (fuzzed),
and a real server seeing requests sent when the schedule says, under the concurrency cap."""
from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_s2st.service import arrivals
from pytest_s2st.service.client import run_load
from pytest_s2st.service.server import make_app, serve_app
from pytest_s2st.service.synthesizers import demo_tone_synthesizer


@pytest.mark.parametrize("rate, shape", [(10.0, 1.0), (4.0, 0.5), (50.0, 4.0)])
def test_schedule_statistics(rate, shape):
    n = 20000
    offsets = np.asarray(arrivals.schedule(n, rate, shape, seed=7))
    gaps = np.diff(np.concatenate([[0.0], offsets]))
    # vLLM's rescaling puts the last arrival exactly on n / rate: the mean rate is the asked one
    assert offsets[-1] == pytest.approx(n / rate, rel=1e-12)
    assert gaps.mean() == pytest.approx(1 / rate, rel=1e-9)
    assert np.all(gaps > 0) and np.all(np.diff(offsets) >= 0)
    # gamma(shape k): coefficient of variation 1/sqrt(k) (1 for Poisson's exponential gaps); method of
    # moments recovers the shape within a few % on 20000 gaps
    cv = gaps.std() / gaps.mean()
    assert cv == pytest.approx(1 / math.sqrt(shape), rel=0.05)
    assert gaps.mean() ** 2 / gaps.var() == pytest.approx(shape, rel=0.08)


def test_poisson_counts_per_window():
    """Poisson arrivals at rate r: counts in 1 s windows have mean and variance r."""
    rate = 20.0
    offsets = np.asarray(arrivals.schedule(40000, rate, 1.0, seed=1))
    counts = np.bincount(offsets.astype(int))[:-1]
    assert counts.mean() == pytest.approx(rate, rel=0.01)
    assert counts.var() == pytest.approx(rate, rel=0.1)


def test_schedule_is_deterministic_and_seeded():
    a = arrivals.schedule(50, 5.0, 1.0)
    assert a == arrivals.schedule(50, 5.0, 1.0) == arrivals.schedule(50, "5", "1")
    assert a != arrivals.schedule(50, 5.0, 1.0, seed=1)


def test_infinite_rate_and_burstiness():
    assert arrivals.schedule(4, math.inf) == [0.0] * 4
    assert arrivals.schedule(4, "inf", 2.0) == [0.0] * 4
    assert arrivals.schedule(4, 2.0, math.inf) == pytest.approx([0.5, 1.0, 1.5, 2.0])
    assert arrivals.schedule(0, 2.0) == []


@pytest.mark.parametrize("value", ["0", "-1", "nan", "fast", "", "1e-300", "1e308", True])
def test_bad_rates_are_one_line(value):
    # 1e-300 requests/s: the level would take ~1e293 years; 1e308: no event loop spaces gaps that short
    with pytest.raises(ValueError, match=r"requests per second in .* or inf"):
        arrivals.parse_rate(value)
    with pytest.raises(ValueError, match="must be a number in"):
        arrivals.parse_burstiness(value)


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.text(max_size=20), st.floats(allow_nan=True), st.integers()))
def test_parsers_fuzzed(value):
    for parse in (arrivals.parse_rate, arrivals.parse_burstiness):
        try:
            out = parse(value)
        except ValueError as exc:
            assert "\n" not in str(exc)
        else:
            assert out > 0 and not math.isnan(out)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 300), st.floats(0.01, 1e4), st.floats(0.05, 50), st.integers(0, 2**32))
def test_schedule_fuzzed(n, rate, shape, seed):
    offsets = arrivals.schedule(n, rate, shape, seed)
    assert len(offsets) == n and all(math.isfinite(x) and x >= 0 for x in offsets)
    assert offsets == sorted(offsets) and offsets[-1] == pytest.approx(n / rate, rel=1e-9)


def test_real_server_sees_requests_sent_on_schedule(tmp_path):
    """Open loop at 20 req/s against the reference server: every request leaves at its due time (within a
    few ms of loop jitter) unless the cap holds it back; ids and due times are the same in a second run."""
    def run(out):
        async def main():
            app = make_app(demo_tone_synthesizer(seconds_per_char=0.001), identity={"model_type": "demo-tone"})
            runner, port = await serve_app(app, shutdown_timeout=0.2)
            try:
                return await run_load(f"http://127.0.0.1:{port}", [{"id": "a", "text": "hi", "seed": 0}], 4,
                                      out_dir=out, warmups=1, requests=30, timeout_s=10,
                                      arrival=arrivals.Gamma(rate=20.0, burstiness=1.0))
            finally:
                await runner.cleanup()
        return asyncio.run(main())

    first = run(tmp_path / "one")
    measured = sorted(first.measured, key=lambda r: r["index"])
    assert all(r["status"] == "ok" for r in measured)
    start = measured[0]["due_t"] - arrivals.schedule(30, 20.0)[0]
    lags = []
    for r, offset in zip(measured, arrivals.schedule(30, 20.0)):
        assert r["due_t"] == pytest.approx(start + offset, abs=1e-9)
        lags.append(r["start_t"] - r["due_t"])
    assert min(lags) >= 0  # never early
    # a tiny request (~1 ms of work) rarely waits for the cap of 4: most leave within 5 ms of their due time
    assert np.median(lags) < 0.005, lags
    # the warm-up stays closed-loop (no due time)
    assert all(r["due_t"] is None for r in first.records if r["warmup"]) and first.warmup_wall_s > 0
    assert first.summary["request_rate"] == 20.0
    assert first.summary["achieved_rate"] == pytest.approx(30 / first.wall_s)
    assert first.summary["achieved_rate"] == pytest.approx(20.0, rel=0.15)

    second = run(tmp_path / "two")
    again = sorted(second.measured, key=lambda r: r["index"])
    assert [r["id"] for r in again] == [r["id"] for r in measured]
    assert [r["due_t"] - again[0]["due_t"] for r in again] == pytest.approx(
        [r["due_t"] - measured[0]["due_t"] for r in measured], abs=1e-9)


def test_concurrency_cap_still_applies(tmp_path):
    """At 1000 req/s against a server taking 50 ms each, no more than `concurrency` are ever in flight."""
    in_flight = {"now": 0, "max": 0}

    async def slow(request):
        in_flight["now"] += 1
        in_flight["max"] = max(in_flight["max"], in_flight["now"])
        try:
            resp = web.StreamResponse(headers={"Content-Type": "audio/pcm"})
            await resp.prepare(request)
            await asyncio.sleep(0.05)
            await resp.write(b"\0\0" * 10)
            await resp.write_eof()
            return resp
        finally:
            in_flight["now"] -= 1

    async def main():
        app = web.Application()
        app.router.add_post("/v1/audio/speech", slow)
        runner, port = await serve_app(app, shutdown_timeout=0.2)
        try:
            return await run_load(f"http://127.0.0.1:{port}", [{"id": "a", "text": "hi"}], 3, out_dir=tmp_path,
                                  warmups=0, requests=12, timeout_s=10, arrival=arrivals.Gamma(1000.0),
                                  protocol="openai",
                                  extra_body={"model": "m"})
        finally:
            await runner.cleanup()

    result = asyncio.run(main())
    assert all(r["status"] == "ok" for r in result.records) and in_flight["max"] == 3
    # all 12 were due within 12 ms; the cap made them wait: 4 rounds of 50 ms
    assert result.wall_s >= 0.2 and result.summary["achieved_rate"] < 60
