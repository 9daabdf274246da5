"""Real pytest sessions of the plugin (pytester): parametrization, table, JSON, budgets, verdicts."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from helpers import BENCH_TEST, write_case

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

FAST = ["-p", "no:cacheprovider", "--s2st-warmup=0", "--benchmark-disable-gc"]


def saved_json(pytester) -> dict:
    files = sorted(pytester.path.glob(".benchmarks/*/*.json"))
    assert files, "no benchmark JSON saved"
    return json.loads(files[-1].read_text())


def test_one_case_per_config_with_stable_ids(pytester):
    a = write_case(pytester.path, "lin", ["build_linear"])
    b = write_case(pytester.path, "np", ["build_numpy"])
    pytester.makepyfile(test_bench=BENCH_TEST)
    result = pytester.runpytest(*FAST, f"--s2st-config={a}", f"--s2st-config={b}", "-v", "--benchmark-autosave")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([
        "*test_inference?callable-lin? PASSED*",
        "*test_inference?callable-np? PASSED*",
        "*s2st: runtime per sample, peak memory, FLOPs*",
        "Name*runtime*95% CI*RSS rise*peak delta*tensor peak*FLOPs",
    ])
    result.stdout.fnmatch_lines(["device peak: no column, n/a for every row: no device memory on cpu",
                                 "methods: time.perf_counter, warm protocol, 1 thread, vmhwm, torch"])
    data = saved_json(pytester)
    rows = {b["name"]: b["extra_info"]["s2st"] for b in data["benchmarks"]}
    lin = rows["test_inference[callable-lin]"]
    # Linear(80 -> 32, no bias) on a (20, 80) input: 2*20*80*32 FLOPs per sample, counted by torch
    assert lin["metrics"]["flops"]["value"] == 2 * 20 * 80 * 32
    assert lin["metrics"]["flops"]["method"].startswith("torch")
    assert lin["metrics"]["runtime_s"]["value"] > 0
    assert lin["metrics"]["runtime_s"]["details"]["threads"] == 1
    assert lin["metrics"]["peak_rss_mib"]["value"] > lin["metrics"]["peak_delta_mib"]["value"] >= 0
    assert lin["metrics"]["peak_rss_mib"]["method"] in ("vmhwm", "memory_profiler")
    assert lin["device"]["name"] == "cpu" and lin["threads"] == 1 and lin["samples"] == 3
    assert any(path.endswith("models.py") for path in lin["assets"])
    # a pure-numpy model dispatches no torch op: FLOPs are null with the reason, never 0
    flops = rows["test_inference[callable-np]"]["metrics"]["flops"]
    assert flops["value"] is None and "no torch operation" in flops["reason"]
    result.stdout.fnmatch_lines(["*flops n/a: *no torch operation*"])


def test_cascade_reports_each_stage_and_totals(pytester):
    cfg = write_case(pytester.path, "two", ["build_linear", "build_second"])
    pytester.makepyfile(test_bench=BENCH_TEST)
    result = pytester.runpytest(*FAST, f"--s2st-config={cfg}", "--benchmark-json=out.json")
    result.assert_outcomes(passed=1)
    s2st = json.loads((pytester.path / "out.json").read_text())["benchmarks"][0]["extra_info"]["s2st"]
    stages = {s["name"]: s["metrics"] for s in s2st["stages"]}
    assert list(stages) == ["stage1", "stage2"]
    # stage2 is measured on stage1's outputs: Linear(32 -> 8) on (20, 32)
    assert stages["stage2"]["flops"]["value"] == 2 * 20 * 32 * 8
    assert s2st["metrics"]["flops"]["value"] == stages["stage1"]["flops"]["value"] + stages["stage2"]["flops"]["value"]
    total_rt = s2st["metrics"]["runtime_s"]["value"]
    assert total_rt == pytest.approx(stages["stage1"]["runtime_s"]["value"] + stages["stage2"]["runtime_s"]["value"])
    assert s2st["metrics"]["peak_rss_mib"]["value"] == max(s["peak_rss_mib"]["value"] for s in stages.values())
    result.stdout.fnmatch_lines(["*test_inference*", "  stage1 *", "  stage2 *"])


BUDGET_TEST = '''
import pytest

@pytest.mark.s2st_budget(flops=1)
def test_over_flops(s2st_pipeline, s2st_dataset, s2st_benchmark):
    s2st_benchmark(s2st_pipeline, s2st_dataset)

@pytest.mark.s2st_budget(flops=1e12, peak_delta_mib=10_000)
def test_within(s2st_pipeline, s2st_dataset, s2st_benchmark):
    s2st_benchmark(s2st_pipeline, s2st_dataset)

@pytest.mark.s2st_budget(device_peak_mib=100)
def test_unmeasurable(s2st_pipeline, s2st_dataset, s2st_benchmark):
    s2st_benchmark(s2st_pipeline, s2st_dataset)
'''


def test_budget_verdicts_become_outcomes(pytester):
    cfg = write_case(pytester.path, "lin", ["build_linear"])
    pytester.makepyfile(test_budget=BUDGET_TEST)
    result = pytester.runpytest(*FAST, f"--s2st-config={cfg}", "-v", "--strict-markers", "--benchmark-json=out.json")
    assert result.parseoutcomes() == {"passed": 1, "failed": 1, "inconclusive": 1}
    assert result.ret == 1
    result.stdout.fnmatch_lines([
        "*test_over_flops*FAILED*",
        "*test_within*PASSED*",
        "*test_unmeasurable*INCONCLUSIVE*",
        f"*flops: measured {2 * 20 * 80 * 32} > budget 1 (method torch*",
        "*s2st INCONCLUSIVE*",
        "*device_peak_mib: no value to check against budget 100 (no device memory on cpu*",
        "*1 failed, 1 passed*1 inconclusive*",
    ])
    benches = {b["name"]: b["extra_info"]["s2st"] for b in json.loads((pytester.path / "out.json").read_text())["benchmarks"]}
    assert benches["test_unmeasurable[callable-lin]"]["verdict"]["status"] == "INCONCLUSIVE"
    assert benches["test_within[callable-lin]"]["verdict"]["status"] == "PASS"


def test_inconclusive_alone_passes_the_session_unless_strict(pytester):
    cfg = write_case(pytester.path, "lin", ["build_linear"])
    pytester.makepyfile(test_budget='''
import pytest

@pytest.mark.s2st_budget(device_peak_mib=100)
def test_unmeasurable(s2st_pipeline, s2st_dataset, s2st_benchmark):
    s2st_benchmark(s2st_pipeline, s2st_dataset)
''')
    lenient = pytester.runpytest(*FAST, f"--s2st-config={cfg}")
    assert lenient.parseoutcomes() == {"inconclusive": 1}
    assert lenient.ret == 0
    strict = pytester.runpytest(*FAST, f"--s2st-config={cfg}", "--s2st-strict")
    strict.assert_outcomes(failed=1)
    assert strict.ret == 1
    strict.stdout.fnmatch_lines(["*INCONCLUSIVE (failing under --s2st-strict)*"])


def test_markers_are_registered_with_help(pytester):
    result = pytester.runpytest("--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.s2st_budget(*", "@pytest.mark.s2st_gate(*", "@pytest.mark.s2st_models(*"])


def test_models_marker_selects_cases(pytester):
    a = write_case(pytester.path, "lin", ["build_linear"])
    b = write_case(pytester.path, "np", ["build_numpy"])
    pytester.makepyfile(test_sel='''
import pytest

@pytest.mark.s2st_models("callable-np")
def test_only_np(s2st_case):
    assert s2st_case.case_id == "callable-np"
''')
    result = pytester.runpytest("-p", "no:cacheprovider", f"--s2st-config={a}", f"--s2st-config={b}", "-v", "--strict-markers")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*test_only_np?callable-np? PASSED*"])


def test_compare_shows_deltas_and_compare_fail_names_the_row(pytester):
    # above glibc's largest mmap threshold (32 MiB), so every call maps fresh pages and RSS rises
    cfg = write_case(pytester.path, "alloc", ["build_alloc"], stage_extra="mib: 40\n")
    pytester.makepyfile(test_bench=BENCH_TEST)
    first = pytester.runpytest(*FAST, f"--s2st-config={cfg}", "--benchmark-autosave")
    first.assert_outcomes(passed=1)
    cfg.write_text(cfg.read_text().replace("mib: 40", "mib: 120"))
    second = pytester.runpytest(*FAST, f"--s2st-config={cfg}", "--benchmark-compare",
                                "--s2st-compare-fail=peak_delta_mib:10%")
    assert second.ret == 1
    second.stdout.fnmatch_lines([
        "*s2st: compared with the saved run*",
        "test_inference?callable-alloc?  then *MiB*MiB",  # then / now / change stacked: one line would pass 120
        "  *now *MiB*MiB",
        "  *change *+*%*+*%",
        "*s2st regressions (--s2st-compare-fail)*",
        "*test_inference?callable-alloc?: peak_delta_mib regressed +*%*limit peak_delta_mib:10%*",
    ])
    # the same run without a limit passes: the comparison alone never fails
    third = pytester.runpytest(*FAST, f"--s2st-config={cfg}", "--benchmark-compare")
    assert third.ret == 0
    # pytest-benchmark's own compare command reads the files we saved
    files = sorted(pytester.path.glob(".benchmarks/*/*.json"))
    cmd = [sys.executable, "-m", "pytest_benchmark", "--storage", str(pytester.path / ".benchmarks"), "compare", "0001"]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=pytester.path)
    assert out.returncode == 0, out.stderr
    assert "test_inference[callable-alloc]" in out.stdout and files


def test_cli_flags_win_over_general_which_wins_over_ini(pytester):
    cfg = write_case(pytester.path, "lin", ["build_linear"], general_extra="repeat: 3\ndataset_size: 2\n")
    pytester.makeini("[pytest]\ns2st_repeat = 5\ns2st_warmup = 0\ns2st_memory = off\n")
    pytester.makepyfile(test_bench=BENCH_TEST)
    pytester.runpytest("-p", "no:cacheprovider", f"--s2st-config={cfg}", "--benchmark-json=a.json").assert_outcomes(passed=1)
    pytester.runpytest("-p", "no:cacheprovider", f"--s2st-config={cfg}", "--s2st-repeat=1", "--benchmark-json=b.json").assert_outcomes(passed=1)
    a = json.loads((pytester.path / "a.json").read_text())["benchmarks"][0]
    b = json.loads((pytester.path / "b.json").read_text())["benchmarks"][0]
    # general.repeat=3 beats the ini's 5; 2 samples x 3 repeats = 6 timed rounds
    assert a["extra_info"]["s2st"]["repeat"] == 3 and a["stats"]["rounds"] == 6
    # 2 samples x 1 repeat, cycled to the default 5 rounds (runner.DEFAULT_MIN_ROUNDS)
    assert b["extra_info"]["s2st"]["repeat"] == 1 and b["stats"]["rounds"] == 5
    # the ini's memory=off applies where neither flag nor config says otherwise
    assert a["extra_info"]["s2st"]["metrics"]["peak_rss_mib"]["value"] is None
    assert a["extra_info"]["s2st"]["metrics"]["peak_rss_mib"]["reason"].startswith("memory measurement disabled")


def test_importing_the_plugin_does_not_import_heavy_modules():
    code = ("import sys, pytest_s2st.plugin; "
            "print(','.join(m for m in ('torch', 'fairseq', 'qwen_tts', 'torch_npu') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_collection_only_session_stays_torch_free(pytester):
    cfg = write_case(pytester.path, "lin", ["build_linear"])
    pytester.makepyfile(test_bench=BENCH_TEST + '''
def test_zz_no_torch():
    import sys
    assert "torch" not in sys.modules
''')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--s2st-config={cfg}", "-k", "no_torch")
    result.assert_outcomes(passed=1)


def test_dump_dir_writes_upstream_named_wavs_at_target_sr(pytester):
    import soundfile as sf

    cfg = write_case(pytester.path, "speech", ["build_speech"],
                     general_extra="dump_waveform_file_prefix: tiny\ntarget_sr: 16000\n")
    pytester.makepyfile(test_bench=BENCH_TEST)
    result = pytester.runpytest(*FAST, f"--s2st-config={cfg}", "--s2st-dump-dir=dumps")
    result.assert_outcomes(passed=1)
    wavs = sorted((pytester.path / "dumps" / "callable-speech").glob("*.wav"))
    assert [w.name for w in wavs] == ["tiny_0_pred.wav", "tiny_1_pred.wav", "tiny_2_pred.wav"]
    data, rate = sf.read(wavs[0])
    # 20 frames x 441 samples at 22.05 kHz = 0.4 s, written at 16 kHz
    assert rate == 16000 and len(data) == 6400


def test_long_datasets_show_progress_every_100_samples(pytester):
    from helpers import make_dataset

    cfg = write_case(pytester.path, "np", ["build_numpy"])
    make_dataset(pytester.path / "data.npy", n=230, frames=4)
    pytester.makepyfile(test_bench=BENCH_TEST)
    result = pytester.runpytest(*FAST, f"--s2st-config={cfg}", "--s2st-memory=off")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([
        "s2st ?callable-np? stage1: flops 100/230",
        "s2st ?callable-np? stage1: flops 200/230",
        "s2st ?callable-np? all stages: timing 100/230",
        "s2st ?callable-np? all stages: timing 200/230",
    ])


def test_dataset_size_is_applied_once_by_the_dataset_fixture(pytester):
    """--s2st-dataset-size cuts s2st_dataset; a dataset the test builds itself is measured as given."""
    cfg = write_case(pytester.path, "np", ["build_numpy"])
    pytester.makepyfile(test_bench='''
def test_fixture_dataset(s2st_pipeline, s2st_dataset, s2st_benchmark):
    assert len(s2st_dataset) == 2
    assert s2st_benchmark(s2st_pipeline, s2st_dataset).info["samples"] == 2

def test_own_dataset(s2st_pipeline, s2st_dataset, s2st_benchmark):
    mine = list(s2st_dataset) * 2
    assert s2st_benchmark(s2st_pipeline, mine).info["samples"] == 4
''')
    result = pytester.runpytest(*FAST, f"--s2st-config={cfg}", "--s2st-dataset-size=2")
    result.assert_outcomes(passed=2)


SLEEPY_PY = '''
import os, time

def build_sleepy():
    delay = float(os.environ["S2ST_TEST_DELAY"])
    def forward(sample):
        time.sleep(delay)
        return 0.0
    return forward
'''


def test_pytest_benchmarks_compare_fail_does_not_hide_ours(pytester, monkeypatch):
    """pytest-benchmark raises from its terminal summary on --benchmark-compare-fail: our tables and
    our regression list still print, and the session still fails."""
    (pytester.path / "sleepy.py").write_text(SLEEPY_PY)
    cfg = write_case(pytester.path, "sleepy", ["build_numpy"])
    cfg.write_text(cfg.read_text().replace("models.py:build_numpy", "sleepy.py:build_sleepy"))
    pytester.makepyfile(test_bench=BENCH_TEST)
    monkeypatch.setenv("S2ST_TEST_DELAY", "0.001")
    first = pytester.runpytest_subprocess(*FAST, f"--s2st-config={cfg}", "--benchmark-autosave", "--s2st-repeat=3")
    first.assert_outcomes(passed=1)
    monkeypatch.setenv("S2ST_TEST_DELAY", "0.02")
    # x20 with one run per side is a gross change (significance.GROSS): past runtime_s:5%; a FLOPs limit on a model
    # with no FLOPs is the test's INCONCLUSIVE (nothing to check), said once
    second = pytester.runpytest_subprocess(*FAST, f"--s2st-config={cfg}", "--benchmark-compare", "--s2st-repeat=3",
                                           "--benchmark-compare-fail=mean:5%", "--s2st-compare-fail=runtime_s:5%,flops:1%")
    assert second.ret != 0
    second.stdout.fnmatch_lines([
        "*s2st: runtime per sample, peak memory, FLOPs*",
        "*s2st: compared with the saved run (then -> now)*",
        "*x*, slower (gross, own x*, 1/1 runs)*",
        "*s2st INCONCLUSIVE*",
        "    limit flops:1% not checked: flops n/a: no torch operation was dispatched*",
        "*s2st regressions (--s2st-compare-fail)*",
        "*runtime_s regressed +*limit runtime_s:5%*",
    ])


def test_stage_budget_judges_that_stage_not_the_total(pytester):
    """stage= budgets one stage of a cascade: stage2's FLOPs (2*20*32*8) are far below the total."""
    cfg = write_case(pytester.path, "two", ["build_linear", "build_second"])
    stage2, total = 2 * 20 * 32 * 8, 2 * 20 * 80 * 32 + 2 * 20 * 32 * 8
    pytester.makepyfile(test_budget=f'''
import pytest

@pytest.mark.s2st_budget(flops={stage2 + 1}, stage="stage2")
def test_stage_within(s2st_pipeline, s2st_dataset, s2st_benchmark):
    s2st_benchmark(s2st_pipeline, s2st_dataset)

@pytest.mark.s2st_budget(flops={stage2 + 1})
def test_total_over(s2st_pipeline, s2st_dataset, s2st_benchmark):
    s2st_benchmark(s2st_pipeline, s2st_dataset)

@pytest.mark.s2st_budget(flops={stage2 - 1}, stage="stage2")
def test_stage_over(s2st_pipeline, s2st_dataset, s2st_benchmark):
    s2st_benchmark(s2st_pipeline, s2st_dataset)

@pytest.mark.s2st_budget(flops=1e12, stage="stage9")
def test_no_such_stage(s2st_pipeline, s2st_dataset, s2st_benchmark):
    s2st_benchmark(s2st_pipeline, s2st_dataset)
''')
    result = pytester.runpytest(*FAST, f"--s2st-config={cfg}", "-v")
    result.assert_outcomes(passed=1, failed=2)  # INCONCLUSIVE is its own outcome
    result.stdout.fnmatch_lines(["*2 failed, 1 passed, 1 inconclusive*"])
    result.stdout.fnmatch_lines_random([
        "*test_stage_within?callable-two? PASSED*",
        "*test_total_over?callable-two? FAILED*",
        "*test_stage_over?callable-two? FAILED*",
        "*test_no_such_stage?callable-two? INCONCLUSIVE*",
        f"*flops: measured {total} > budget {stage2 + 1}*",
        f"*flops (stage stage2): measured {stage2} > budget {stage2 - 1}*",
        "*budget names stage 'stage9', measured stages: stage1, stage2*",
    ])


def test_a_case_name_with_dots_and_slashes_dumps_under_the_dump_dir(pytester):
    cfg = write_case(pytester.path, "speech", ["build_speech"])
    cfg.write_text(cfg.read_text().replace("name: speech", "name: ../../../escaped"))
    pytester.makepyfile(test_bench=BENCH_TEST)
    result = pytester.runpytest(*FAST, f"--s2st-config={cfg}", "--s2st-dump-dir=dumps")
    result.assert_outcomes(passed=1)
    wavs = list(pytester.path.rglob("*.wav"))
    assert wavs and all(w.resolve().is_relative_to((pytester.path / "dumps").resolve()) for w in wavs)
    assert not (pytester.path.parent / "escaped").exists()


def test_compare_says_which_rows_have_no_counterpart_and_compare_fail_fails_on_them(pytester):
    """A compare that matches only some rows says which did not; under --s2st-compare-fail an
    unmatched row is a failure: nothing was checked for it."""
    a = write_case(pytester.path, "lin", ["build_linear"])
    b = write_case(pytester.path, "np", ["build_numpy"])
    pytester.makepyfile(test_bench=BENCH_TEST)
    first = pytester.runpytest(*FAST, f"--s2st-config={a}", "--benchmark-autosave")
    first.assert_outcomes(passed=1)
    plain = pytester.runpytest(*FAST, f"--s2st-config={a}", f"--s2st-config={b}", "--benchmark-compare")
    plain.assert_outcomes(passed=2)
    assert plain.ret == 0
    plain.stdout.fnmatch_lines(["*s2st: 1 of 2 benchmark(s) have no counterpart in the compared run*",
                                "*test_bench.py::test_inference?callable-np?"])
    gated = pytester.runpytest(*FAST, f"--s2st-config={a}", f"--s2st-config={b}", "--benchmark-compare",
                               "--s2st-compare-fail=flops:1%")
    assert gated.ret == 1
    gated.stdout.fnmatch_lines(["*s2st limits not checked (--s2st-compare-fail)*",
                                "test_bench.py::test_inference?callable-np?: no counterpart in the compared run*"])


DOUBLING_PY = '''
import os, torch

def build_linear_n():
    torch.manual_seed(0)
    layer = torch.nn.Linear(80, 32, bias=False)
    times = int(os.environ["S2ST_TEST_TIMES"])
    def forward(sample):
        with torch.inference_mode():
            x = torch.as_tensor(sample["net_input"]["src_tokens"], dtype=torch.float32)
            for _ in range(times):
                out = layer(x)
            return out
    return forward
'''


def test_compare_matches_however_the_config_path_was_spelled(pytester, tmp_path, monkeypatch):
    """Issue 11's reproduction: `--s2st-config /elsewhere/other.yaml` (space form) moves pytest's rootdir,
    so node ids change between runs; our compare matches on the stable identity and catches doubled FLOPs."""
    bench = pytester.mkdir("benchmarks")
    (bench / "test_bench.py").write_text(BENCH_TEST)
    (pytester.path / "dbl.py").write_text(DOUBLING_PY)
    mine = write_case(pytester.path, "mm", ["build_numpy"])
    mine.write_text(mine.read_text().replace("models.py:build_numpy", "dbl.py:build_linear_n"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    other = write_case(elsewhere, "other", ["build_numpy"])
    monkeypatch.setenv("S2ST_TEST_TIMES", "1")
    first = pytester.runpytest_subprocess(*FAST, "benchmarks", "--s2st-config", str(mine), "--s2st-config", str(other),
                                          "--benchmark-autosave")
    first.assert_outcomes(passed=2)
    monkeypatch.setenv("S2ST_TEST_TIMES", "2")  # twice the work
    second = pytester.runpytest_subprocess(*FAST, "benchmarks", f"--s2st-config={mine}", f"--s2st-config={other}",
                                           "--benchmark-compare", "--s2st-compare-fail=flops:1%")
    assert second.ret == 1
    second.stdout.fnmatch_lines(["*s2st regressions (--s2st-compare-fail)*",
                                 "*test_inference?callable-mm?: flops regressed +100.00%*"])
    assert "no counterpart" not in second.stdout.str()


def test_compare_fail_on_a_metric_one_run_did_not_measure_says_why(pytester):
    """A limit on a metric missing from the saved run checked nothing: a failure naming the side and the
    reason, as an unmatched row is (not a silent pass). Missing from this run: the test's INCONCLUSIVE, one
    line with the metric's reason, not "1 passed" (--s2st-strict fails it)."""
    cfg = write_case(pytester.path, "lin", ["build_linear"])
    pytester.makepyfile(test_bench=BENCH_TEST)
    first = pytester.runpytest(*FAST, f"--s2st-config={cfg}", "--benchmark-autosave", "--s2st-flops=off")
    first.assert_outcomes(passed=1)
    gated = pytester.runpytest(*FAST, f"--s2st-config={cfg}", "--benchmark-compare", "--s2st-compare-fail=flops:1%")
    assert gated.ret == 1
    gated.stdout.fnmatch_lines(["*s2st limits not checked (--s2st-compare-fail)*",
                                "*test_inference?callable-lin?: flops not measured in the compared run "
                                "(compared: *disabled*), so limit flops:1% was not checked*"])
    both = pytester.runpytest(*FAST, f"--s2st-config={cfg}", "--benchmark-compare", "--s2st-flops=off",
                              "--s2st-compare-fail=flops:1%")
    assert both.ret == 0 and both.parseoutcomes() == {"inconclusive": 1}
    both.stdout.fnmatch_lines(["*s2st INCONCLUSIVE*", "test_bench.py::test_inference?callable-lin?:",
                               "    limit flops:1% not checked: flops n/a: FLOP counting disabled (--s2st-flops=off)"])
    assert "s2st regressions" not in both.stdout.str() and "s2st limits not checked" not in both.stdout.str()
    strict = pytester.runpytest(*FAST, f"--s2st-config={cfg}", "--benchmark-compare", "--s2st-flops=off",
                                "--s2st-compare-fail=flops:1%", "--s2st-strict")
    assert strict.ret == 1


@pytest.mark.parametrize("bad, said", [("x", "extra_info.s2st is a JSON string, not an object"),
                                       ([], "extra_info.s2st is a JSON array, not an object")])
def test_a_saved_row_whose_s2st_is_not_an_object_is_named_not_unmatched(pytester, bad, said):
    """A hand-edited saved run whose extra_info.s2st is not an object: the compare names the file and the
    key, instead of "no counterpart" (which sends the user looking for a renamed test)."""
    a = write_case(pytester.path, "lin", ["build_linear"])
    pytester.makepyfile(test_bench=BENCH_TEST)
    pytester.runpytest(*FAST, f"--s2st-config={a}", "--benchmark-autosave").assert_outcomes(passed=1)
    (saved,) = pytester.path.glob(".benchmarks/*/*.json")
    data = json.loads(saved.read_text())
    data["benchmarks"][0]["extra_info"]["s2st"] = bad
    saved.write_text(json.dumps(data))
    gated = pytester.runpytest(*FAST, f"--s2st-config={a}", "--benchmark-compare", "--s2st-compare-fail=flops:1%")
    assert gated.ret == 1
    text = gated.stdout.str()
    lines = [line for line in text.splitlines() if said in line and str(saved.name) in line]
    assert lines and any("so no limit was checked" in line for line in lines), text
    assert "no counterpart in the compared run, so" not in text
