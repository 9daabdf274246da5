"""No long phase is silent: progress.phase writes a line every interval (10 s; shortened here through the private
S2ST_PROGRESS_EVERY_S) saying what, how far and how long, through the writer the plugin installs, none under -q.
Slowed phases: a sleepy block, a fake valgrind that sleeps, a first model build that sleeps, a service level whose
model sleeps. Assertions are on counts far below what the interval allows (machine-independent), never on timings."""
from __future__ import annotations

import json
import re
import time

import pytest

from pytest_s2st import progress

FAST_EVERY = "0.1"


@pytest.fixture
def lines(monkeypatch):
    """The progress lines the core writes while the test runs (a writer installed as the plugin installs its own)."""
    monkeypatch.setenv(progress.EVERY_ENV, FAST_EVERY)
    got: list[str] = []
    progress.install(got.append)
    yield got
    progress.remove(got.append)


def test_a_long_phase_writes_what_how_far_and_how_long_left(lines):
    done = iter(range(1, 100))
    with progress.phase("stirring", total=40, unit="cups", done=lambda: next(done)):
        time.sleep(1.0)  # ten intervals
    assert len(lines) >= 3, lines
    first = lines[0]
    assert re.fullmatch(r"s2st: stirring: 1/40 cups, \d+ s so far, about \d+ s left", first), first
    counts = [int(re.search(r": (\d+)/40", line).group(1)) for line in lines]
    assert counts == sorted(counts)


def test_a_short_phase_writes_nothing_and_an_inner_phase_speaks_for_the_outer(lines):
    with progress.phase("quick"):
        pass
    assert lines == []
    with progress.phase("outer"):
        with progress.phase("inner", limit_s=3600):
            time.sleep(0.6)
    inner = [line for line in lines if line.startswith("s2st: inner: ")]
    # the outer phase may get one word in between the inner one's end and its own, never while the inner runs
    assert len(inner) >= 2 and len(lines) - len(inner) <= 1, lines
    assert inner[0].endswith("so far, gives up after 1 h 00 min")


def test_without_a_writer_a_phase_is_silent_and_a_failing_writer_loses_only_its_line(monkeypatch):
    monkeypatch.setenv(progress.EVERY_ENV, FAST_EVERY)
    with progress.phase("alone"):
        time.sleep(0.3)  # nowhere to write: nothing happens

    def broken(line: str) -> None:
        raise OSError("terminal closed")

    progress.install(broken)
    try:
        with progress.phase("still measured"):
            time.sleep(0.3)
    finally:
        progress.remove(broken)


def test_status_line_words():
    assert progress.status_line("x", 125.0, 3, 14, "requests") == "s2st: x: 3/14 requests, 2 min 05 s so far, " \
                                                                  "about 7 min 38 s left"
    assert progress.status_line("x", 5.0) == "s2st: x: 5 s so far"
    assert progress.status_line("x", 5.0, 14, 14, "requests", limit_s=60) == "s2st: x: 14/14 requests, 5 s so far"
    assert progress.duration(3725) == "1 h 02 min"


def test_an_instruction_count_reports_while_valgrind_runs(lines, tmp_path, monkeypatch):
    """A fake valgrind that takes a second and fails: the count says why it has no value, and meanwhile the
    phase said what it was doing."""
    from pytest_s2st.measure import instructions as instr

    instr.build_shim()  # the real shim (valgrind's header), built before PATH loses the real valgrind
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "valgrind").write_text("#!/bin/sh\nsleep 1\nexit 3\n")
    (fake / "valgrind").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:/usr/bin:/bin")
    with pytest.raises(instr.Unavailable, match="the valgrind child exited 3"):
        instr.count_pipeline({"case_id": "slowcase"}, {"x": 1}, timeout_s=60)
    assert len(lines) >= 3, lines
    assert all(line.startswith("s2st: counting instructions under valgrind (slowcase): 0 stage(s) counted, ")
               for line in lines), lines


def test_a_first_model_build_reports_while_it_builds(lines, tmp_path):
    from pytest_s2st.tiny.cache import build_once

    def build(out):
        time.sleep(0.8)
        out.mkdir()
        (out / "DONE").write_text("")

    build_once(tmp_path / "model", "DONE", build, "the sleepy model")
    assert len(lines) >= 3 and lines[0].startswith("s2st: building the sleepy model (first use only: cached after): ")
    lines.clear()
    build_once(tmp_path / "model", "DONE", build, "the sleepy model")  # cached: no phase at all
    assert lines == []


SLOW_TONE_PY = '''
import time
import numpy as np

def build_tone(sample_rate=8000, delay_s=0.25):
    def forward(sample):
        time.sleep(delay_s)
        return {"waveform": np.full(800, 0.2, np.float32), "sample_rate": sample_rate}
    return forward
'''

SERVICE_TEST = '''
def test_service(s2st_service, s2st_workload, s2st_concurrency, s2st_load):
    s2st_load(s2st_service, s2st_workload, concurrency=s2st_concurrency)
'''


def test_a_slow_service_level_reports_requests_done_and_q_silences_it(pytester, monkeypatch):
    """A level of 1 warm-up + 4 requests of 0.25 s each (~1.25 s): with a 0.1 s interval, lines counting the
    requests done of 5 (the terminal writer the plugin installed); under -q, none."""
    monkeypatch.setenv(progress.EVERY_ENV, FAST_EVERY)
    (pytester.path / "tone.py").write_text(SLOW_TONE_PY)
    (pytester.path / "wl.jsonl").write_text("".join(
        json.dumps({"id": f"u{i}", "text": "hello", "language": "en", "voice": "a", "seed": i}) + "\n"
        for i in range(4)))
    cfg = pytester.path / "tone.yaml"
    cfg.write_text("general:\n  name: slow\n  model_type: callable\n  workload: wl.jsonl\n  concurrency: [1]\n"
                   "  warmup: 1\nstage1:\n  entry: tone.py:build_tone\n")
    pytester.makepyfile(test_service=SERVICE_TEST)
    result = pytester.runpytest("-p", "no:cacheprovider", f"--s2st-config={cfg}")
    result.assert_outcomes(passed=1)
    found = [line for line in result.stdout.lines if line.startswith("s2st: service level ")]
    assert len(found) >= 3, "\n".join(result.stdout.lines)
    assert all(re.match(r"s2st: service level callable-slow/test_service/c1: [0-5]/5 requests, \d+ s so far", line)
               for line in found), found
    # pytest-benchmark's table leaves the level out (one round of its whole wall time), and says so
    assert not any(line.startswith("Name (time in") for line in result.stdout.lines)
    assert any("pytest-benchmark's table leaves these 1 level(s) out" in line for line in result.stdout.lines)
    quiet = pytester.runpytest("-p", "no:cacheprovider", f"--s2st-config={cfg}", "-q")
    quiet.assert_outcomes(passed=1)
    assert not [line for line in quiet.stdout.lines if line.startswith("s2st: ")], "\n".join(quiet.stdout.lines)


@pytest.mark.parametrize("knob, every", [("1e-9", progress.MIN_EVERY_S), ("0.1", 0.1), ("0", progress.EVERY_S),
                                         ("nan", progress.EVERY_S), ("inf", progress.EVERY_S),
                                         ("1e9", progress.EVERY_S), ("soon", progress.EVERY_S)])
def test_the_interval_knob_is_clamped(monkeypatch, knob, every):
    monkeypatch.setenv(progress.EVERY_ENV, knob)
    assert progress.interval() == every
