"""One service level driven from several xdist workers (--s2st-level-parts): real pytest sessions against the
reference server; the merged level is checked against stats.summarize over the parts' own requests.jsonl."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_s2st import runs
from pytest_s2st.errors import S2STError
from pytest_s2st.plugin_xdist import part_of
from pytest_s2st.service.parts import (mark, parse_part_id, part_concurrency, part_id, rotate, wait_for)
from pytest_s2st.service.stats import summarize

from helpers import write_tone_case

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

FAST = ["-p", "no:cacheprovider", "--s2st-warmup=0"]
SERVICE = '''
import pytest

@pytest.mark.s2st_models("callable-tone")
@pytest.mark.s2st_budget(ttfa_s_p99=60)
def test_service(s2st_service, s2st_workload, s2st_concurrency, s2st_load):
    s2st_load(s2st_service, s2st_workload, concurrency=s2st_concurrency)
'''


def _run(pytester, *args, delay_s: float = 0.0):
    cfg = write_tone_case(pytester.path, "tone", service=True)
    if delay_s:  # each request takes at least this long: a part lasts longer than any start skew
        cfg.write_text(cfg.read_text() + f"  delay_s: {delay_s}\n")
    pytester.makepyfile(test_bench=SERVICE)
    result = pytester.runpytest_subprocess(*FAST, f"--s2st-config={cfg}", "--s2st-concurrency=4", "--s2st-level-parts=2",
                                           "--benchmark-json=out.json", "--s2st-evidence-dir=ev", "-v", *args)
    return result, result.stdout.str() + result.stderr.str()


def _level_dir(pytester) -> Path:
    (root,) = (pytester.path / "ev").iterdir()
    return root / "callable-tone" / "test_service" / "c4"


def _abs_sends(part_dir: Path) -> list[tuple[float, float]]:
    level = runs.read_summary(part_dir)["by_concurrency"]["2"]
    return [(level["started_wall"] + r["send_t"], level["started_wall"] + r["done_t"])
            for r in runs.read_records(part_dir) if not r["warmup"]]


def test_two_workers_drive_one_level_merged_exactly(pytester):
    # 24 measured requests of >= 20 ms per part at c2: each part lasts >= 240 ms, far longer than the start skew
    result, out = _run(pytester, "-p", "xdist", "-n", "2", "--dist", "loadgroup", "--s2st-requests=24", delay_s=0.02)
    assert result.parseoutcomes() == {"passed": 2}, out
    section = out.split("s2st: service (TTFA, RTF, latency per concurrency level)")[1].split("evidence (")[0]
    table = [line for line in section.splitlines() if line.startswith("test_service[") and line.split()[1].isdigit()]
    # ONE row in each of the two service tables (latency; playback and load)
    assert [line.split()[0:2] for line in table] == [["test_service[callable-tone-c4]", "4"]] * 2, out
    data = {b["fullname"]: b["extra_info"] for b in json.loads((pytester.path / "out.json").read_text())["benchmarks"]}
    merged = [e["s2st_service"] for e in data.values() if "s2st_service" in e]
    parts = [e["s2st_service_part"] for e in data.values() if "s2st_service_part" in e]
    assert len(merged) == 1 and len(parts) == 1  # saved once
    level = merged[0]
    assert level["concurrency"] == 4 and level["level_parts"] == 2 and level["concurrent"] is True
    assert {p["xdist_worker"] for p in level["parts"]} == {"gw0", "gw1"}  # two client processes
    assert [p["concurrency"] for p in level["parts"]] == [2, 2]
    # n is the sum of the parts; percentiles are summarize() over the union of the parts' records
    level_dir = _level_dir(pytester)
    union = [dict(r, id=f"{pid}-{r['id']}") for pid in ("p1of2", "p2of2") for r in runs.read_records(level_dir / pid)]
    assert level["summary"]["n"] == sum(p["n"] for p in level["parts"]) == 48 == level["summary"]["n_ok"]
    exact = summarize(union, level["summary"]["wall_s"])
    for metric in ("ttfa_s", "rtf", "latency_s", "underrun_s"):
        assert level["summary"][metric] == exact[metric], metric
    ids = [r["id"] for r in runs.read_records(level_dir)]  # the level dir's merged requests.jsonl
    assert len(ids) == len(set(ids)) == 48 and all(i.startswith(("p1of2-", "p2of2-")) for i in ids)
    # started together: the parts' measured requests overlap in wall-clock time
    one, two = _abs_sends(level_dir / "p1of2"), _abs_sends(level_dir / "p2of2")
    assert min(s for s, _ in two) < max(d for _, d in one) and min(s for s, _ in one) < max(d for _, d in two)
    assert level["start_spread_s"] < 0.5  # released at one wall-clock instant, not on each part's next poll
    # the merged wall spans the first part's start to the last part's end
    assert level["summary"]["wall_s"] >= max(p["wall_s"] for p in level["parts"]) - 1e-5  # time.time() rounding
    assert level["summary"]["wall_s"] == pytest.approx(max(p["measured_end_s"] for p in level["parts"]))


def test_several_levels_among_other_tests_each_run_on_two_workers(pytester):
    """The scheduler puts each level's parts on different workers, in the same order, among other tests."""
    (pytester.path / "test_other.py").write_text("import pytest\n\n@pytest.mark.parametrize('i', range(6))\n"
                                                 "def test_other(i):\n    pass\n")
    result, out = _run(pytester, "-p", "xdist", "-n", "2", "--dist", "loadgroup", "--s2st-concurrency=2,4")
    assert result.parseoutcomes() == {"passed": 10}, out
    levels = [b["extra_info"]["s2st_service"] for b in json.loads((pytester.path / "out.json").read_text())["benchmarks"]
              if "s2st_service" in b["extra_info"]]
    assert sorted(lv["concurrency"] for lv in levels) == [2, 4]
    for lv in levels:
        assert lv["concurrent"] is True and {p["xdist_worker"] for p in lv["parts"]} == {"gw0", "gw1"}
        assert lv["summary"]["n_ok"] == 8


def test_without_workers_the_parts_run_one_after_another_and_say_so(pytester):
    result, out = _run(pytester)
    assert result.parseoutcomes() == {"passed": 1, "inconclusive": 1}, out
    assert out.count("ran as 2 parts of c2 one after another (no xdist workers)") == 1, out
    level = [b["extra_info"]["s2st_service"] for b in json.loads((pytester.path / "out.json").read_text())["benchmarks"]
             if "s2st_service" in b["extra_info"]]
    assert len(level) == 1 and level[0]["concurrent"] is False and level[0]["summary"]["n"] == 8
    # sequential: the second part's first send comes after the first part's last completion
    level_dir = _level_dir(pytester)
    assert min(s for s, _ in _abs_sends(level_dir / "p2of2")) > max(d for _, d in _abs_sends(level_dir / "p1of2"))


def test_a_part_that_never_arrives_is_inconclusive_within_the_bound(pytester):
    start = time.monotonic()
    result, out = _run(pytester, "-p", "xdist", "-n", "2", "--s2st-level-parts-wait=3", "-k", "p1of2")
    outcomes = result.parseoutcomes()
    assert outcomes["inconclusive"] == 1 and not {"passed", "failed", "error"} & set(outcomes), out
    assert out.count("p2of2 did not arrive within 3 s (--s2st-level-parts-wait); the level was not driven") == 1, out
    assert time.monotonic() - start < 120
    assert not (_level_dir(pytester) / "p1of2").exists()  # no load was sent


def test_a_level_the_parts_do_not_divide_and_too_few_workers_are_one_line_errors(pytester):
    result, out = _run(pytester, "--s2st-concurrency=3")  # the service test's module: one collection error line
    assert result.ret == pytest.ExitCode.INTERRUPTED and result.parseoutcomes() == {"errors": 1}, out
    assert "--s2st-level-parts 2 (case callable-tone" in out and "concurrency 3 cannot be split into 2 equal parts" in out
    assert "Traceback" not in out and "_caller.py" not in out
    result, out = _run(pytester, "-p", "xdist", "-n", "1")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, out
    assert "needs at least 2 xdist workers (-n 2), got 1" in out and "Traceback" not in out
    result, out = _run(pytester, "-p", "xdist", "-n", "2", "--dist", "loadscope")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, out
    assert "needs --dist load or loadgroup, got --dist loadscope" in out


# ---------------------------------------------------------------------------------------------- units


def test_part_ids_and_splits():
    assert part_id(3, 4) == "p3of4" and parse_part_id("p3of4") == (3, 4)
    assert parse_part_id("p5of4") is None and parse_part_id("p0of4") is None and parse_part_id("x") is None
    assert part_concurrency(256, 4, "flag") == 64
    with pytest.raises(S2STError, match="^flag: concurrency 6 cannot be split into 4 equal parts"):
        part_concurrency(6, 4, "flag")
    assert part_of("t.py::test_service[tone-c8-p2of4]") == 2 and part_of("t.py::test_service[tone-c8]@tone") is None
    items = [{"id": i} for i in range(8)]
    assert [r[0]["id"] for r in (rotate(items, k, 4) for k in range(1, 5))] == [0, 2, 4, 6]


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=300))
def test_a_damaged_rendezvous_file_is_one_error_line(tmp_path_factory, raw):
    level = tmp_path_factory.mktemp("lv")
    (level / "parts").mkdir()
    (level / "parts" / "p1of1.ready").write_bytes(raw)
    try:
        found, missing = wait_for(level, 1, "ready", 0.0)
    except S2STError as exc:
        assert str(exc).startswith(str(level / "parts" / "p1of1.ready")) and "\n" not in str(exc)
    else:
        assert missing == [] and isinstance(found[1], dict)


def test_the_rendezvous_waits_until_all_arrive_and_is_bounded(tmp_path):
    mark(tmp_path, 1, 2, "ready", {"endpoint": "e"})
    now = [0.0]
    found, missing = wait_for(tmp_path, 2, "ready", 5.0, clock=lambda: now[0],
                              sleep=lambda s: now.__setitem__(0, now[0] + 1.0))
    assert missing == ["p2of2"] and found == {1: {"endpoint": "e"}} and now[0] == 5.0
    mark(tmp_path, 2, 2, "ready", {})
    found, missing = wait_for(tmp_path, 2, "ready", 5.0)
    assert missing == [] and set(found) == {1, 2}


def test_the_parts_are_released_at_one_instant_after_the_last_arrival():
    from pytest_s2st.service.parts import RELEASE_MARGIN_S, release_at, sleep_until
    at = release_at({1: {"wall": 100.0}, 2: {"wall": 100.5}})
    assert at == 100.5 + RELEASE_MARGIN_S
    for bad in ({}, {1: {"wall": 1.0}, 2: {}}, {1: {"wall": "x"}}, {1: {"wall": float("nan")}}, {1: {"wall": True}}):
        with pytest.raises(S2STError, match="ready mark"):
            release_at(bad)
    now = [100.6]
    late = sleep_until(at, clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s))
    assert now[0] == pytest.approx(at) and late == pytest.approx(0.0)
    now = [at + 0.3]  # a part that arrives after the instant goes at once and says how late it is
    assert sleep_until(at, clock=lambda: now[0], sleep=lambda s: pytest.fail("slept")) == pytest.approx(0.3)


def _part_dir(root: Path, pid: str, started_wall: float, sends: list[float]) -> Path:
    d = root / pid
    d.mkdir(parents=True)
    records = [{"id": f"c2-r{i}", "warmup": False, "status": "ok", "send_t": s, "first_audio_t": s + 0.1,
                "done_t": s + 0.3, "audio_seconds": 1.0, "chunks": [[s + 0.1, 3200]], "sample_rate": 16000,
                "wav": f"wav/c2-r{i}.wav"} for i, s in enumerate(sends)]
    (d / runs.REQUESTS).write_text("".join(json.dumps(r) + "\n" for r in records))
    runs.write_summary(d, {}, concurrency=2, endpoint="http://127.0.0.1:9/v1/audio/speech", identity=None,
                       extra={"started_wall": started_wall, "warmup_wall_s": 0.1, "wall_s": 1.0, "t0_perf": 5.0})
    return d


def test_merge_puts_the_parts_on_one_clock_with_known_truth(tmp_path):
    from pytest_s2st.service.parts import merge_parts

    one = _part_dir(tmp_path, "p1of2", 100.0, [0.1, 0.2, 0.5])
    two = _part_dir(tmp_path, "p2of2", 100.5, [0.1, 0.3])
    records, summary, facts = merge_parts([("p1of2", one, 2), ("p2of2", two, 2)])
    # origin = part 1's measured start (100.0 + 0.1); the end = part 2's (100.5 + 0.1 + 1.0)
    assert summary["wall_s"] == pytest.approx(1.5) and summary["n"] == 5
    assert [f["measured_start_s"] for f in facts] == pytest.approx([0.0, 0.5])
    shifted = {r["id"]: r for r in records}
    # a time t of part k is at started_wall_k + t; on the level's clock, minus the origin 100.1
    assert shifted["p2of2-c2-r1"]["send_t"] == pytest.approx(0.7) and shifted["p1of2-c2-r1"]["send_t"] == pytest.approx(0.1)
    assert shifted["p2of2-c2-r0"]["chunks"] == [[pytest.approx(0.6), 3200]]
    assert shifted["p2of2-c2-r0"]["wav"] == "p2of2/wav/c2-r0.wav"
    assert summary["ttfa_s"]["p50"] == pytest.approx(0.1) and summary["latency_s"]["n"] == 5
    assert summary["throughput"] == pytest.approx(5 / 1.5)
