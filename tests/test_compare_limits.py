"""Compare limits are honest: every metric says which way is better, a limit is unambiguous or refused, a
compare between rows of other work gives no verdict, and a limit not checked is never called "regressed"."""
from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings, strategies as st

from helpers import BENCH_TEST, make_dataset, write_case
from pytest_s2st import metrics
from pytest_s2st.budget import FAIL, PASS, check_budget
from pytest_s2st.errors import S2STError
from pytest_s2st.limits import CompareLimit, compare_limits
from pytest_s2st.measure.record import Metric
from pytest_s2st.judging import judge_limits, regressions
from pytest_s2st.report import render_compare
from pytest_s2st.rows import Row, SavedRow

FAST = ["-p", "no:cacheprovider", "--s2st-warmup=0"]
FUZZ = settings(max_examples=300, deadline=None, database=None)


# ------------------------------------------------------------------------------------------- directions

def test_every_metric_says_which_way_is_better():
    higher = {m.name for m in metrics.METRICS if m.better == metrics.HIGHER}
    neither = {m.name for m in metrics.METRICS if m.better == metrics.NEITHER}
    assert all(m.better in (metrics.LOWER, metrics.HIGHER, metrics.NEITHER) for m in metrics.METRICS)
    # scores and rates of good things rise; times, memory, counts of work and of failures fall
    assert higher == {"bleu", "chrf", "asr_bleu", "asr_chrf", "continuity_rate", "throughput"}
    assert neither == {"audio_duration_s"}  # the workload's audio length: no limit may judge it
    for m in metrics.METRICS:
        if m.comparable or m.budgetable:
            assert m.better in (metrics.LOWER, metrics.HIGHER), m.name


def test_a_metric_without_a_direction_is_refused_where_it_is_defined():
    with pytest.raises(ValueError, match="say which is better"):
        metrics.MetricDef("x", "x", "s", metrics.fmt_seconds, metrics.INFERENCE, "m")
    with pytest.raises(ValueError, match="a limit needs a direction"):
        metrics.MetricDef("x", "x", "s", metrics.fmt_seconds, metrics.INFERENCE, "m", better=metrics.NEITHER)


def _row(name: str, value: float) -> tuple[Row, SavedRow]:
    entry = {name: {"value": value, "method": "m"}}
    return Row("t", "t.py::t", entry, key="k"), SavedRow.from_metrics(entry)


@pytest.mark.parametrize("old, new, crossed", [(20.0, 30.0, None), (30.0, 20.0, "-33.33%"), (30.0, 29.8, None)])
def test_a_bleu_limit_fails_on_a_drop_never_on_a_rise(old, new, crossed):
    # 30 -> 20: (20 - 30) / 30 = -33.33 %, a drop past 1 %; 30 -> 29.8: -0.67 %, within it; 20 -> 30 is better
    row, _ = _row("bleu", new)
    _, saved = _row("bleu", old)
    found = regressions([row], {"k": saved}, compare_limits("bleu:1%"))
    if crossed is None:
        assert found == []
    else:
        assert found == [f"t.py::t: bleu regressed {crossed} ({old:.2f} -> {new:.2f}; higher is better), limit bleu:1%"]


def test_a_lower_is_better_limit_still_fails_on_a_rise():
    row, _ = _row("flops", 2000.0)
    _, saved = _row("flops", 1000.0)
    assert regressions([row], {"k": saved}, compare_limits("flops:1%")) == [
        "t.py::t: flops regressed +100.00% (1.000 k -> 2.000 k), limit flops:1%"]
    assert regressions([row], {"k": saved}, compare_limits("flops:1000FLOPs")) == []  # +1000 is not past 1000
    assert regressions([row], {"k": saved}, compare_limits("flops:999FLOPs")) == [
        "t.py::t: flops regressed +1000 FLOPs (1.000 k -> 2.000 k), limit flops:999FLOPs"]


def test_a_budget_on_a_higher_is_better_metric_is_a_floor():
    lookup = lambda value: (lambda name, stage: Metric(value, "sacrebleu"))  # noqa: E731
    assert check_budget(lookup(25.0), {"bleu": 20.0}).status == PASS
    low = check_budget(lookup(15.0), {"bleu": 20.0})
    assert low.status == FAIL and low.reasons == ["bleu: measured 15 < budget 20 (higher is better; method sacrebleu)"]
    assert check_budget(lookup(15.0), {"runtime_s": 20.0}).status == PASS


# ------------------------------------------------------------------------------------------- the grammar

@pytest.mark.parametrize("text, limit", [
    ("runtime_s:5%", CompareLimit("runtime_s", 5.0, True)),
    ("runtime_s:+2ms", CompareLimit("runtime_s", 0.002, False)),
    ("runtime_s:0.5s", CompareLimit("runtime_s", 0.5, False)),
    ("peak_delta_mib:512KiB", CompareLimit("peak_delta_mib", 0.5, False)),
    ("peak_delta_mib:2GiB", CompareLimit("peak_delta_mib", 2048.0, False)),
    ("flops:1e6FLOPs", CompareLimit("flops", 1e6, False)),
    ("instructions:0%", CompareLimit("instructions", 0.0, True)),  # 0 is a limit: any growth fails
    ("bleu:1%", CompareLimit("bleu", 1.0, True)),
])
def test_limits_parse_to_a_relative_or_an_absolute_limit_in_the_metrics_unit(text, limit):
    assert compare_limits(text) == (limit,)
    assert compare_limits(str(limit)) == (limit,)  # its text parses back (the workers get limits this way)


@pytest.mark.parametrize("text, said", [
    ("runtime_s:5", "a bare number is ambiguous; write runtime_s:5% (relative) or runtime_s:5s (absolute, in s)"),
    ("flops:10", "flops:5% (relative) or flops:5FLOPs (absolute, in FLOPs)"),
    ("bleu:1pt", "unit 'pt' is not bleu's (absolute units: none: it has no unit, give a percent)"),
    ("runtime_s:5MiB", "unit 'MiB' is not runtime_s's (absolute units: one of s, ms, us, ns)"),
    ("runtime_s:-5%", "a limit is a number >= 0"),
    ("runtime_s:1e999%", "1e999 is not a finite number"),
    ("runtime_s:nan%", "bad item 'runtime_s:nan%'"),
    ("runtime_s:5%,runtime_s:2ms", "runtime_s is limited twice (runtime_s:5% and runtime_s:2ms)"),
    ("runtime_s:5%,", "an empty item"),
    ("throughput:5%", "unknown metric 'throughput'"),
    ("runtim_s:5%", "did you mean 'runtime_s'?"),
    ("runtime_s:5%," * 300, "over the 2000 a list of limits may have"),
])
def test_an_ambiguous_or_bad_limit_is_refused_in_one_line(text, said):
    with pytest.raises(ValueError) as e:
        compare_limits(text)
    assert said in str(e.value) and "\n" not in str(e.value)


grammar = st.text(alphabet="runtime_sflopbeuchrkdaMiBGKm%+-.:,e0123456789 \n\x00é", max_size=40)


@FUZZ
@given(text=grammar | st.text(max_size=60) | st.builds(
    lambda m, n, u: f"{m}:{n}{u}", st.sampled_from(metrics.COMPARABLE + ("x",)),
    st.floats(allow_nan=True, allow_infinity=True).map(repr) | st.integers(-5, 10**400).map(str),
    st.sampled_from(["", "%", "s", "ms", "MiB", "KiB", "FLOPs", "Ir", "pt", "%%"])))
def test_fuzz_the_limit_parser(text):
    try:
        limits = compare_limits(text)
    except ValueError as exc:
        assert str(exc) and "\n" not in str(exc).replace(repr("\n")[1:-1], "")
        return
    assert limits and len({lim.metric for lim in limits}) == len(limits)
    for lim in limits:
        assert lim.metric in metrics.COMPARABLE and math.isfinite(lim.limit) and lim.limit >= 0
        assert compare_limits(str(lim))[0].percent == lim.percent
        assert math.isclose(compare_limits(str(lim))[0].limit, lim.limit, rel_tol=1e-5)


# ------------------------------------------------------------------------------ the runner's metric names

def test_a_metric_the_table_lacks_is_refused_not_dropped():
    from pytest_s2st.measurement import Measurement, StageResult

    m = Measurement("case", "callable", [StageResult("a", {"runtime_s": Metric(1.0, "t"), "speed": Metric(2.0, "x")}),
                                         StageResult("b", {"runtime_s": Metric(1.0, "t")})])
    with pytest.raises(S2STError, match=r"case: metric\(s\) 'speed' not in the metric table"):
        m.to_dict()
    m.stages[0].metrics.pop("speed")
    assert m.to_dict()["metrics"]["runtime_s"]["value"] == 2.0  # the cascade's sum


# --------------------------------------------------------------------------- through pytest (the user's path)

def test_a_saved_row_of_other_work_gets_no_verdict_and_its_limits_are_unchecked_not_regressed(pytester):
    """Issue: a saved row of another dataset size under the same test id read 'x0.000, faster (gross, 1/1 runs)'."""
    cfg = write_case(pytester.path, "lin", ["build_linear"])
    pytester.makepyfile(test_bench=BENCH_TEST)
    first = pytester.runpytest(*FAST, f"--s2st-config={cfg}", "--benchmark-autosave")
    first.assert_outcomes(passed=1)
    make_dataset(pytester.path / "data.npy", n=5)  # the same test id, 5 samples where the saved row had 3
    plain = pytester.runpytest(*FAST, f"--s2st-config={cfg}", "--benchmark-compare")
    assert plain.ret == 0
    out = plain.stdout.str()
    [change] = [line.split() for line in out.splitlines() if line.strip().startswith("change")]
    assert change == ["change"] + ["other", "work"] * 5 and "gross" not in out and "cannot tell" not in out, out
    plain.stdout.fnmatch_lines(["*test_inference?callable-lin?: not the same work as the compared row (samples 3 -> 5;"
                                " inputs_sha256", "    * -> *): no verdict"])  # wrapped at 120 columns
    gated = pytester.runpytest(*FAST, f"--s2st-config={cfg}", "--benchmark-compare", "--s2st-compare-fail=flops:1%")
    assert gated.ret == 1
    assert gated.parseoutcomes() == {"passed": 1, "unchecked": 1}
    gated.stdout.fnmatch_lines(["*s2st limits not checked (--s2st-compare-fail)*",
                                "*test_inference?callable-lin?: not the same work as the compared row (samples 3 -> 5*"
                                "so no limit was checked"])
    assert "s2st regressions" not in gated.stdout.str() and " regressed " not in gated.stdout.str()


def test_a_bare_number_limit_is_a_usage_error_before_any_test_runs(pytester):
    pytester.makepyfile(test_x="def test_x(s2st_benchmark):\n    s2st_benchmark(lambda x: x, [1])\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--s2st-compare-fail=runtime_s:5")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = [line for line in result.stderr.lines if "runtime_s:5" in line]
    assert len(err) == 1 and err[0].endswith("--s2st-compare-fail: bad item 'runtime_s:5': a bare number is "
                                             "ambiguous; write runtime_s:5% (relative) or runtime_s:5s (absolute, "
                                             "in s)"), result.stderr.str()
    assert "passed" not in result.stdout.str()


def test_an_absolute_limit_judges_in_the_metrics_unit(pytester):
    """runtime_s:5% is relative; flops:1FLOPs is absolute: a doubled Linear adds 2*20*80*32 FLOPs per sample."""
    cfg = write_case(pytester.path, "lin", ["build_linear"])
    pytester.makepyfile(test_bench=BENCH_TEST)
    pytester.runpytest(*FAST, f"--s2st-config={cfg}", "--benchmark-autosave").assert_outcomes(passed=1)
    cfg.write_text(cfg.read_text() + "  hidden: 64\n")
    grown = pytester.runpytest(*FAST, f"--s2st-config={cfg}", "--benchmark-compare",
                               "--s2st-compare-fail=flops:102400FLOPs")  # +102,400 exactly: not past
    assert grown.ret == 0, grown.stdout.str()
    past = pytester.runpytest(*FAST, f"--s2st-config={cfg}", "--benchmark-compare",
                              "--s2st-compare-fail=flops:102399FLOPs")
    assert past.ret == 1 and past.parseoutcomes() == {"passed": 1, "regressed": 1}
    past.stdout.fnmatch_lines(["*: flops regressed +102400 FLOPs (102.400 k -> 204.800 k), limit flops:102399FLOPs"])


def test_judge_limits_keeps_crossed_and_unchecked_apart():
    row, _ = _row("flops", 2.0)
    _, saved = _row("flops", 1.0)
    lone = Row("u", "t.py::u", {"flops": {"value": 1.0}}, key="u")
    crossed, unchecked = judge_limits([row, lone], {"k": saved}, compare_limits("flops:1%"))
    assert crossed == ["t.py::t: flops regressed +100.00% (1 -> 2), limit flops:1%"]
    assert unchecked == ["t.py::u: no counterpart in the compared run, so no limit was checked"]
    assert render_compare([row], {"k": saved})  # a table, no crash, for rows without a work record
