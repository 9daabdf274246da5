"""Streaming-playback metrics (runs.playback_metrics, stats.playback_summary) as vLLM-Omni defines them.

Hand-made chunk timelines with hand-computed answers (times and sizes are binary fractions, so the
arithmetic is exact), hypothesis invariants, and real loopback servers: the non-streaming reference
server (whole waveform, then chunks: no underrun after the first packet) and a paced streaming server
in this file whose chunks arrive slower than real time (underruns as computed by hand).
"""
from __future__ import annotations

import asyncio
import importlib.util
import json
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_s2st.runs import CONTINUITY_THRESHOLD_S, playback_metrics
from pytest_s2st.service.client import run_load
from pytest_s2st.service.server import make_app, serve_app
from pytest_s2st.service.synthesizers import demo_tone_synthesizer
from pytest_s2st.service.stats import summarize

# the paced streaming server of tools/measure_playback.py (the script measures what these tests check)
_spec = importlib.util.spec_from_file_location(
    "measure_playback", Path(__file__).resolve().parent.parent / "tools" / "measure_playback.py")
_tool = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_tool)

RATE = 8000  # 16000 bytes per second of int16 mono
QUARTER = 4000  # bytes: 0.25 s of audio at RATE


def rec(chunks, rate=RATE, status="ok", audio=None, **kw):
    audio = sum(n for _, n in chunks) / (2 * rate) if audio is None and isinstance(chunks, list) else audio
    return {"status": status, "sample_rate": rate, "chunks": chunks, "audio_seconds": audio, "send_t": 0.0,
            "first_audio_t": 0.0, "done_t": 3.0, **kw}


# --- hand-made timelines ---------------------------------------------------------------------------


def test_all_audio_at_once_has_no_underrun_after_the_first_packet():
    m = playback_metrics(rec([[1.0, QUARTER], [1.0, QUARTER], [1.0, QUARTER], [1.0, QUARTER]]))
    assert m == {"underrun_s": 0.0, "underrun_events": 0, "underrun_longest_s": 0.0, "continuity_ok": True,
                 "gaps_s": [0.0, 0.0, 0.0], "audio_duration_s": 1.0, "reason": None}


def test_chunks_slower_than_real_time_by_hand():
    # 0.25 s chunks every 0.5 s. At t=0.5 the player has played 0.5 s of 0.25 s received: 0.25 behind;
    # t=1.0: 1.0 - 0.5 = 0.5; t=1.5: 1.5 - 0.75 = 0.75. Worst 0.75, three late chunks. A player that
    # waits when dry stalls 0.25 s before each later chunk: longest spell 0.25, total 0.75 = the worst.
    m = playback_metrics(rec([[10.0, QUARTER], [10.5, QUARTER], [11.0, QUARTER], [11.5, QUARTER]]))
    assert m["underrun_s"] == 0.75 and m["underrun_events"] == 3 and m["underrun_longest_s"] == 0.25
    assert m["continuity_ok"] is False and m["gaps_s"] == [0.5, 0.5, 0.5] and m["audio_duration_s"] == 1.0


def test_vllm_omni_worst_is_the_max_not_the_sum():
    # vLLM-Omni's own example (100 ms chunks at 0, 0.3, 0.45 s: deficits 0.2 and 0.25) at 8 kHz
    m = playback_metrics(rec([[0.0, 1600], [0.3, 1600], [0.45, 1600]]))
    assert m["underrun_s"] == pytest.approx(0.25, abs=1e-12) and m["underrun_events"] == 2
    # the waiting player: dry 0.2 s before the second chunk, then it holds until 0.5 > 0.45: one spell
    assert m["underrun_longest_s"] == pytest.approx(0.2, abs=1e-12) and m["continuity_ok"] is False


def test_a_chunk_exactly_at_the_boundary_is_no_underrun():
    # the second chunk lands exactly when the first 0.25 s has played out: deficit 0, not late
    m = playback_metrics(rec([[2.0, QUARTER], [2.25, QUARTER]]))
    assert (m["underrun_s"], m["underrun_events"], m["underrun_longest_s"], m["continuity_ok"]) == (0.0, 0, 0.0, True)
    # 1/8 s late: one event; the threshold is inclusive (vLLM-Omni: max_underrun_s <= threshold_s)
    late = rec([[2.0, QUARTER], [2.375, QUARTER]])
    m = playback_metrics(late, threshold_s=0.125)
    assert (m["underrun_s"], m["underrun_events"], m["continuity_ok"]) == (0.125, 1, True)
    assert playback_metrics(late, threshold_s=0.0625)["continuity_ok"] is False
    # the default threshold: vLLM-Omni's 0.1 s
    assert CONTINUITY_THRESHOLD_S == 0.1 and playback_metrics(late)["continuity_ok"] is False


def test_zero_length_chunks_carry_no_audio_and_do_not_start_the_player():
    # an empty event at 0.5 (before any audio) and one between: t0 is the first NON-empty chunk (1.0)
    m = playback_metrics(rec([[0.5, 0], [1.0, QUARTER], [1.2, 0], [1.5, QUARTER]]))
    assert m["underrun_s"] == 0.25 and m["underrun_events"] == 1 and m["gaps_s"] == [0.5]
    # a single audio chunk: nothing can be late, and there is no gap (an empty list, not a 0)
    one = playback_metrics(rec([[0.25, 0], [1.0, QUARTER]]))
    assert one["underrun_s"] == 0.0 and one["gaps_s"] == [] and one["continuity_ok"] is True


@pytest.mark.parametrize("record, reason", [
    (rec([[0.0, QUARTER]], status="error"), "request did not complete ok"),
    ({"status": "ok", "sample_rate": RATE, "audio_seconds": 1.0}, "record has no chunk timeline"),
    (rec([[0.0, 0], [1.0, 0]], audio=1.0), "the chunk timeline holds no audio bytes"),
    (rec([[0.0, QUARTER]], rate=0, audio=1.0), "sample_rate 0 is not a positive integer"),
    (rec([[0.0, QUARTER]], rate=True, audio=1.0), "sample_rate True is not a positive integer"),
    (rec([[0.0, QUARTER], [1.0]], audio=1.0), "chunk 1 is not [seconds, bytes >= 0]"),
    (rec([[0.0, QUARTER], [float("nan"), 2]], audio=1.0), "chunk 1 is not [seconds, bytes >= 0]"),
    (rec([[0.0, QUARTER], [1.0, -2]], audio=1.0), "chunk 1 is not [seconds, bytes >= 0]"),
    (rec([[0.0, QUARTER], [1.0, True]], audio=1.0), "chunk 1 is not [seconds, bytes >= 0]"),
    (rec([[1.0, QUARTER], [0.5, QUARTER]]), "chunk 1 arrived before chunk 0 (0.5 < 1.0)"),
])
def test_missing_or_broken_timeline_is_none_with_a_reason(record, reason):
    m = playback_metrics(record)
    assert reason in m["reason"]
    for key in ("underrun_s", "underrun_events", "underrun_longest_s", "continuity_ok", "gaps_s"):
        assert m[key] is None, key  # never a silent 0 / True / []


# --- the level summary -----------------------------------------------------------------------------


def test_summary_by_hand():
    records = [
        rec([[10.0, QUARTER], [10.5, QUARTER], [11.0, QUARTER], [11.5, QUARTER]]),  # worst 0.75, 3 events
        rec([[1.0, QUARTER], [1.0, QUARTER]]),  # all at once: 0, 0 events, gap 0
        rec([[2.0, QUARTER], [2.375, QUARTER]]),  # 0.125 late: 1 event
        rec([[0.0, QUARTER]], status="error"),  # failed: not a playback sample
        rec([[0.0, QUARTER], [9.0, QUARTER]], warmup=True),  # warm-up: not counted
    ]
    s = summarize(records, wall_s=4.0)
    # underrun sorted [0, 0.125, 0.75]: mean 0.875/3; p50 rank 1 -> 0.125; p90 rank 1.8 -> 0.125 + 0.8*0.625 = 0.625
    assert s["underrun_s"] == {"n": 3, "mean": pytest.approx(0.875 / 3), "p50": 0.125, "p90": pytest.approx(0.625),
                               "p99": pytest.approx(0.125 + 0.98 * 0.625)}
    assert s["underrun_events"]["mean"] == pytest.approx(4 / 3) and s["underrun_events"]["p50"] == 1
    assert s["underrun_longest_s"]["p50"] == 0.125
    # gaps pooled: [0.5, 0.5, 0.5, 0.0, 0.375] -> sorted [0, 0.375, 0.5, 0.5, 0.5], p50 = 0.5
    assert s["gap_s"]["n"] == 5 and s["gap_s"]["p50"] == 0.5 and s["gap_s"]["mean"] == pytest.approx(1.875 / 5)
    assert s["continuity_rate"] == pytest.approx(1 / 3)  # 0.75 and 0.125 are both past 0.1 s
    assert s["audio_duration_s"]["n"] == 3 and s["n_playback"] == 3
    assert s["continuity_threshold_s"] == 0.1
    assert set(s["reasons"]) == {"goodput"}


def test_summary_without_any_timeline_is_none_with_reasons():
    s = summarize([{"status": "ok", "send_t": 0.0, "first_audio_t": 0.1, "done_t": 0.2, "audio_seconds": 1.0}], 1.0)
    assert s["underrun_s"]["p99"] is None and s["continuity_rate"] is None and s["gap_s"]["n"] == 0
    assert s["reasons"]["underrun_s"].startswith("no ok request has a usable chunk timeline (first: record has no")
    assert s["reasons"]["continuity_rate"] == s["reasons"]["underrun_s"]
    assert s["audio_duration_s"]["p50"] == 1.0  # the duration does not need the timeline
    one_chunk = summarize([rec([[0.0, QUARTER]])], 1.0)
    assert one_chunk["underrun_s"]["p50"] == 0.0 and one_chunk["gap_s"]["n"] == 0
    assert "one audio chunk" in one_chunk["reasons"]["gap_s"]
    mixed = summarize([rec([[0.0, QUARTER]]), rec("garbage", audio=1.0)], 1.0)
    assert mixed["n_playback"] == 1 and "1 of 2 ok requests" in mixed["reasons"]["playback_skipped"]


# --- invariants ------------------------------------------------------------------------------------

sizes = st.integers(min_value=0, max_value=20000)
gaps = st.floats(min_value=0.0, max_value=2.0, allow_nan=False)


@st.composite
def timelines(draw):
    rate = draw(st.sampled_from([8000, 16000, 22050, 24000]))
    steps = draw(st.lists(st.tuples(gaps, sizes), min_size=1, max_size=30))
    start = draw(st.floats(min_value=0.0, max_value=1e5, allow_nan=False))
    t, chunks = start, []
    for gap, n in steps:
        t += gap
        chunks.append([t, n])
    return rate, chunks


def waiting_player(times, secs):
    """An independent simulation: a player that waits when dry; returns (dry spells)."""
    spells, end = [], times[0] + secs[0]
    for t, d in zip(times[1:], secs[1:]):
        if t > end:
            spells.append(t - end)
            end = t
        end += d
    return spells


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(timelines())
def test_invariants(timeline):
    rate, chunks = timeline
    m = playback_metrics(rec(chunks, rate=rate))
    audio = [(t, n) for t, n in chunks if n > 0]
    if not audio:
        assert m["reason"] == "the chunk timeline holds no audio bytes" and m["underrun_s"] is None
        return
    assert m["reason"] is None
    times, secs = [t for t, _ in audio], [n / (2 * rate) for _, n in audio]
    eps = 1e-9 * (1 + abs(times[-1]))
    u = m["underrun_s"]
    assert u >= 0 and 0 <= m["underrun_events"] <= len(audio) - 1
    assert (u > 0) == (m["underrun_events"] > 0)
    # the total dry time of a player that waits equals the worst deficit (vLLM-Omni's number)
    spells = waiting_player(times, secs)
    assert sum(spells) == pytest.approx(u, abs=1e-6)
    assert m["underrun_longest_s"] == pytest.approx(max(spells, default=0.0), abs=1e-6)
    assert m["underrun_longest_s"] <= u + 1e-6 and len(spells) <= m["underrun_events"]
    # bounds from the last arrival: at least its own deficit, at most the wait after the first chunk ran out
    last_deficit = (times[-1] - times[0]) - sum(secs[:-1])
    assert u >= max(0.0, last_deficit) - eps
    assert u <= max(0.0, times[-1] - times[0] - secs[0]) + eps
    assert m["continuity_ok"] == (u <= CONTINUITY_THRESHOLD_S)
    assert sum(m["gaps_s"]) == pytest.approx(times[-1] - times[0], abs=eps * len(times))
    assert all(g >= 0 for g in m["gaps_s"]) and len(m["gaps_s"]) == len(audio) - 1


@settings(max_examples=200, deadline=None)
@given(st.lists(timelines(), min_size=1, max_size=6))
def test_continuity_rate_is_a_fraction(batch):
    s = summarize([rec(chunks, rate=rate) for rate, chunks in batch], wall_s=1.0)
    rate = s["continuity_rate"]
    assert rate is None or 0.0 <= rate <= 1.0
    assert (rate is None) == (s["n_playback"] == 0)


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
                           max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(json_values, json_values)
def test_any_json_timeline_gives_numbers_or_a_reason(chunks, rate):
    m = playback_metrics({"status": "ok", "chunks": chunks, "sample_rate": rate, "audio_seconds": 1.0})
    if m["reason"] is None:
        assert m["underrun_s"] >= 0 and isinstance(m["underrun_events"], int)
    else:
        assert isinstance(m["reason"], str) and len(m["reason"]) < 200 and m["underrun_s"] is None


# --- real servers on loopback ----------------------------------------------------------------------

WORKLOAD = [{"id": "a", "text": "hello there, a longer sentence", "language": "English", "voice": "Ryan", "seed": 1}]
PACED_CHUNKS, PACED_SAMPLES, PACED_SLEEP = 4, 800, 0.3  # 0.1 s of audio every 0.3 s


def paced_app() -> web.Application:
    return _tool.paced_app(PACED_SAMPLES / RATE, PACED_SLEEP, PACED_CHUNKS, rate=RATE)


# by hand, for the nominal schedule: deficits at 0.3, 0.6, 0.9 s are 0.2, 0.4, 0.6 s (played 0.3i, received
# 0.1i); worst 0.6, three late chunks; the waiting player is dry 0.2 s before each: longest 0.2
PACED_UNDERRUN, PACED_EVENTS, PACED_LONGEST = 0.6, 3, 0.2
SLACK = 0.08  # scheduler jitter on a shared 2-core machine (a late first stamp shrinks the deficits)


def check_paced(m):
    assert m["underrun_events"] == PACED_EVENTS and m["continuity_ok"] is False
    assert m["underrun_s"] == pytest.approx(PACED_UNDERRUN, abs=SLACK), m
    assert m["underrun_longest_s"] == pytest.approx(PACED_LONGEST, abs=SLACK), m
    assert all(g == pytest.approx(PACED_SLEEP, abs=SLACK) for g in m["gaps_s"]), m["gaps_s"]


def load(tmp_path, app, requests=2):
    async def main():
        runner, port = await serve_app(app, shutdown_timeout=0.5)
        try:
            return await run_load(f"http://127.0.0.1:{port}", WORKLOAD, 1, out_dir=tmp_path, warmups=0,
                                  requests=requests, timeout_s=10.0)
        finally:
            await runner.cleanup()

    return asyncio.run(asyncio.wait_for(main(), 60))


def test_reference_server_is_non_streaming_so_no_underrun_after_the_first_packet(tmp_path):
    app = make_app(demo_tone_synthesizer(sample_rate=RATE), identity={"code": "ref"}, chunk_samples=400)
    result = load(tmp_path, app)
    for r in result.measured:
        m = playback_metrics(r)
        assert r["status"] == "ok" and len([c for c in r["chunks"] if c[1]]) > 3  # several chunks, all at once
        assert m["underrun_s"] == 0.0 and m["underrun_events"] == 0 and m["continuity_ok"] is True
        assert max(m["gaps_s"]) < 0.05  # read back to back: far below the 50 ms of audio in each chunk
    s = result.summary
    assert s["underrun_s"]["p99"] == 0.0 and s["continuity_rate"] == 1.0 and s["n_playback"] == 2


def test_paced_streaming_server_underruns_as_computed_by_hand(tmp_path):
    result = load(tmp_path, paced_app())
    for r in result.measured:
        assert r["status"] == "ok", r["error"]
        check_paced(playback_metrics(r))
    s = result.summary
    assert s["continuity_rate"] == 0.0 and s["underrun_events"]["p50"] == PACED_EVENTS
    assert s["underrun_s"]["p99"] == pytest.approx(PACED_UNDERRUN, abs=SLACK)
    # the same numbers are on disk in the level's summary.json (the JSON the gate and compare read)
    saved = json.loads((tmp_path / "summary.json").read_text())["by_concurrency"]["1"]["summary"]
    assert saved["underrun_s"] == s["underrun_s"] and saved["continuity_rate"] == 0.0


@contextmanager
def paced_server_thread():
    """The paced server on its own loop in a thread: a pytester subprocess benchmarks it as an endpoint."""
    loop = asyncio.new_event_loop()
    started: dict = {}
    ready = threading.Event()

    def run():
        asyncio.set_event_loop(loop)
        started["runner"], started["port"] = loop.run_until_complete(serve_app(paced_app(), shutdown_timeout=0.5))
        ready.set()
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert ready.wait(30)
    try:
        yield f"http://127.0.0.1:{started['port']}"
    finally:
        asyncio.run_coroutine_threadsafe(started["runner"].cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


def test_underrun_budget_table_and_json_in_a_pytest_session(pytester):
    """s2st_budget(underrun_s_p99=...) fails a streaming service that falls behind; the service table
    shows underrun and continuity; the benchmark JSON keeps the playback statistics."""
    (pytester.path / "tone.py").write_text(
        "import numpy as np\n\ndef make():\n    return lambda s: {'waveform': np.zeros(800, np.float32), 'sample_rate': 8000}\n")
    (pytester.path / "wl.jsonl").write_text(json.dumps({"id": "u0", "text": "hi", "language": "en", "voice": "a", "seed": 0}) + "\n")
    cfg = pytester.path / "paced.yaml"
    cfg.write_text("general:\n  name: paced\n  model_type: callable\n  workload: wl.jsonl\n  warmup: 0\n"
                   "stage1:\n  entry: tone.py:make\n")
    pytester.makepyfile(test_service='''
import pytest

@pytest.mark.s2st_budget(underrun_s_p99=0.3)
def test_behind(s2st_service, s2st_workload, s2st_concurrency, s2st_load):
    s2st_load(s2st_service, s2st_workload, concurrency=s2st_concurrency)

@pytest.mark.s2st_budget(underrun_s_p99=5, underrun_events_p99=3, gap_s_p99=5)
def test_within(s2st_service, s2st_workload, s2st_concurrency, s2st_load):
    s2st_load(s2st_service, s2st_workload, concurrency=s2st_concurrency)
''')
    with paced_server_thread() as endpoint:
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--s2st-config={cfg}", "-v",
                                               f"--s2st-endpoint={endpoint}", "--s2st-concurrency=1",
                                               "--s2st-requests=1", "--benchmark-json=out.json")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines_random([
        "*test_behind?callable-paced-c1? FAILED*",
        "*test_within?callable-paced-c1? PASSED*",
        "*underrun_s_p99: measured 0.* > budget 0.3 (method *",
        "Name*conc*ok/n*TTFA p50*p99*RTF p50*p99*latency p99*errors*goodput",
        "Name*conc*underrun p99*continuity*chunk gap p99*throughput*rate asked*rate got",
        "test_within?callable-paced-c1?*1/1*0.0%*",
    ])
    benches = {b["name"]: b["extra_info"]["s2st_service"]
               for b in json.loads((pytester.path / "out.json").read_text())["benchmarks"]}
    summary = benches["test_within[callable-paced-c1]"]["summary"]
    assert summary["underrun_events"]["p99"] == PACED_EVENTS and summary["continuity_rate"] == 0.0
    assert summary["underrun_s"]["p99"] == pytest.approx(PACED_UNDERRUN, abs=SLACK)


def test_plot_draws_playback_panels_and_says_why_one_is_empty(tmp_path):
    from pytest_s2st.plot import plot_service  # matplotlib: the [plot] extra, part of [dev]

    slow = [rec([[i * 0.5, QUARTER] for i in range(4)]) for _ in range(3)]
    bare = [{"status": "ok", "send_t": 0.0, "first_audio_t": 0.1, "done_t": 0.2, "audio_seconds": 1.0}]
    results = [("a", {"case": "../../out/side", "concurrency": c, "summary": summarize(slow, 1.0)}) for c in (1, 2)]
    results.append(("b", {"case": "bare", "concurrency": 1, "summary": summarize(bare, 1.0)}))
    written = plot_service(results, tmp_path / "plots")
    assert len(written) == 2 and all(p.parent == tmp_path / "plots" and p.stat().st_size > 1000 for p in written)
    assert not (tmp_path / "out").exists()  # a case name is one file name under the plot dir


def test_plot_help_names_every_panel():
    """--s2st-plot's help listed four panels of six; the underrun panels were missing (issue 32 item 7)."""
    from pytest_s2st.plot import PANELS
    from pytest_s2st.settings import BY_NAME as SETTINGS

    help_text = SETTINGS["plot"].help
    missing = [title for _, title, _, _ in PANELS if title.split(" (")[0].lower() not in help_text.lower()]
    assert missing == []
