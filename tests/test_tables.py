"""Tables a person reads in a 120-column terminal (methods once as a footnote, one unit per column, every n/a
explained, rates in words), --help with real defaults and a sentence per ini option, and the service plot's panels."""
from __future__ import annotations

import re

import pytest

from helpers import BENCH_TEST, write_case
from pytest_s2st.metrics import column_format
from pytest_s2st.report import missing_notes, render_table, table_notes, wrap
from pytest_s2st.report_service import render_service_table
from pytest_s2st.rows import Row, SavedRow

WIDTH = 120


def test_one_unit_per_column_from_its_largest_value():
    # tensor peaks of 62.5 KiB and 2.5 MiB: one column in MiB (0.061035 MiB = 62.5 KiB, three significant digits)
    fmt = column_format("tensor_peak_mib", [62.5 / 1024, 2.5, None])
    assert [fmt(62.5 / 1024), fmt(2.5), fmt(None)] == ["0.0610 MiB", "2.5 MiB", "n/a"]
    fmt = column_format("flops", [1.6e6, 1.5e10])  # k/M/G never mixed: both in G
    assert [fmt(1.6e6), fmt(1.5e10)] == ["0.00160 G", "15.000 G"]
    fmt = column_format("runtime_s", [66.51e-6, 1.2e-3])
    assert [fmt(66.51e-6), fmt(1.2e-3)] == ["0.0665 ms", "1.200 ms"]
    assert column_format("underrun_s", [0.0, 0.2])(0.0) == "0 ms"  # zero is a value, in the column's unit
    assert column_format("underrun_s", [0.0, 0.0])(0.0) == "0 s"
    assert column_format("flops", [360, 12])(12) == "12"  # plain counts stay integers


def _metrics(runtime, tensor, flops, method="torch", rounds=5):
    return {"runtime_s": {"value": runtime, "method": "timer:time.perf_counter",
                          "details": {"rounds_s": [runtime] * rounds, "precision": 0.05, "protocol": "warm",
                                      "threads": 1}},
            "rss_rise_mib": {"value": 251.3, "method": "vmhwm"},
            "peak_rss_mib": {"value": 251.3, "method": "vmhwm"},
            "peak_delta_mib": {"value": 0.4, "method": "vmhwm"},
            "device_peak_mib": {"value": None, "method": "cuda", "reason": "cpu run: no device memory"},
            "tensor_peak_mib": {"value": tensor, "method": "dispatch"},
            "flops": {"value": flops, "method": method}}


def test_methods_are_a_footnote_and_units_do_not_mix_within_a_column():
    rows = [Row("test_a", "a", _metrics(66.5e-6, 62.5 / 1024, 1.6e6), "PASS"),
            Row("test_b", "b", _metrics(1.5e-3, 2.5, 2.1e9, rounds=2), "PASS")]
    lines = render_table(rows)
    assert "methods" not in lines[0] and "time.perf_counter" not in "\n".join(lines)  # no column repeating it
    body = "\n".join(lines[2:])
    assert not re.search(r"KiB|\d M\b|\d us\b", body)  # MiB, G, ms only
    assert "0.0610 MiB" in lines[2] and "0.00160 G" in lines[2] and "0.0665 ms" in lines[2]
    assert "±5.0% n=5" in lines[2] and "n=2 too few" in lines[3]  # the interval, per row, in its own column
    assert table_notes(rows)[-1] == "methods: time.perf_counter, warm protocol, 1 thread, vmhwm, torch"
    rows.append(Row("test_c", "c", _metrics(1e-3, 1.0, 1e9, method="papi")))
    lines, notes = render_table(rows), table_notes(rows)
    assert lines[0].split()[-2:] == ["methods", "verdict"]
    assert [line.split()[-2] for line in lines[2:4]] == ["a", "a"] and lines[4].split()[-1] == "b"
    assert notes[-2:] == ["methods a: time.perf_counter, warm protocol, 1 thread, vmhwm, torch",
                          "methods b: time.perf_counter, warm protocol, 1 thread, vmhwm, papi"]


# the embedded default's rows (pytest benchmarks/test_inference.py with fairseq and qwen-tts installed) and, per
# column, ten times the largest value this 2-core machine measured for them (Qwen3TTS-tiny: 7.9 s, 638 MiB, 310 M
# FLOPs), the widest interval cell and verdict
EMBEDDED_ROWS = ["test_inference[callable-demo]", "test_inference[S2T-tiny]", "test_inference[MT-tiny]",
                 "test_inference[TTS-tiny]", "test_inference[S2S-tiny]", "test_inference[S2UT-tiny]", "  s2u",
                 "  vocoder", "test_inference[2StageS2ST-tiny]", "  s2t", "  tts", "test_inference[3StageS2ST-tiny]",
                 "  s2t", "  mt", "  tts", "test_inference[Qwen3TTS-tiny]"]


def test_the_embedded_default_rows_fit_120_columns():
    measured = [  # runtime s, peak RSS, peak delta, tensor peak MiB, FLOPs: as measured, times ten below
        (0.00301, 253.0, 0.4, 0.234, 20.128e6), (0.0671, 431.6, 0.0, 0.0341, 1.017e6), (0.261, 438.2, 0.0, 0.0322, 0.560e6),
        (0.462, 441.6, 0.2, 0.383, 7.287e6), (0.338, 442.2, 0.0, 0.272, 7.738e6), (0.247, 450.0, 6.8, 0.473, 7.903e6),
        (0.231, 443.2, 0.0, 0.214, 3.455e6), (0.0157, 450.0, 6.8, 0.473, 4.448e6), (0.336, 450.2, 0.0, 0.385, 8.363e6),
        (0.0802, 450.1, 0.0, 0.0341, 1.017e6), (0.256, 450.2, 0.0, 0.385, 7.346e6), (0.565, 454.9, 0.0, 0.386, 8.997e6),
        (0.119, 454.8, 0.0, 0.0341, 1.017e6), (0.162, 454.9, 0.0, 0.0427, 0.644e6), (0.284, 454.9, 0.0, 0.386, 7.337e6),
        (7.909, 637.9, 9.7, 3.3, 309.664e6)]
    rows = []
    for name, (runtime, rss, delta, tensor, flops) in zip(EMBEDDED_ROWS, measured):
        m = _metrics(10 * runtime, 10 * tensor, 10 * flops, rounds=2 if "mt" in name else 5)
        m["runtime_s"]["details"]["precision"] = 2.275  # ±228%: the widest interval this machine printed
        m["peak_rss_mib"]["value"], m["peak_delta_mib"]["value"] = 10 * rss, 10 * delta
        m["rss_rise_mib"]["value"] = 10 * rss  # the rise is at most the whole process's peak
        rows.append(Row(name, name, m, "INCONCLUSIVE"))
    lines = render_table(rows) + wrap(table_notes(rows) + [f"note: {n}" for n in missing_notes(rows)])
    assert max(map(len, lines)) <= WIDTH, "\n".join(lines)
    assert "device peak" not in lines[0]  # n/a on every (cpu) row: one note instead of a column
    assert "device peak: no column, n/a for every row: cpu run: no device memory" in lines
    assert "±228% n=5" in lines[2] and "n=2 too few" in next(line for line in lines if line.startswith("  mt"))


def test_a_cascade_s_stage_reasons_make_one_device_peak_note():
    def m(reason):
        return {"device_peak_mib": {"value": None, "reason": reason}, "runtime_s": {"value": 1.0, "method": "x"}}

    rows = [Row("test_x", "x", m("s2u: no device memory on cpu; vocoder: no device memory on cpu")),
            Row("  s2u", "x::s2u", m("no device memory on cpu")), Row("  vocoder", "x::vocoder", m("no device memory on cpu"))]
    assert "device peak" not in render_table(rows)[0]
    assert table_notes(rows)[0] == "device peak: no column, n/a for every row: no device memory on cpu"


def _level(c, n_ok=12, rate="inf", goodput=None, reasons=None):
    seconds = {"mean": 12.3456, "p50": 0.0123, "p90": 12.3456, "p99": 123.456}
    return {"concurrency": c, "summary": {
        "n": 12, "n_ok": n_ok, "ttfa_s": seconds, "latency_s": seconds, "underrun_s": seconds, "gap_s": seconds,
        "rtf": {"p50": 12.345, "p99": 123.456}, "continuity_rate": 1.0, "throughput": 123.45, "error_rate": 0.25,
        "goodput": goodput, "request_rate": rate, "achieved_rate": 7.96, "reasons": reasons or {}}}


def test_the_service_tables_fit_120_columns_and_say_rates_and_n_a_in_words():
    levels = [(f"test_service[Qwen3TTS-tiny-c{c}]", _level(c, reasons={"goodput": "no targets given (x)"}))
              for c in (1, 4, 16)]
    levels.append(("test_service[Qwen3TTS-tiny-c64]", _level(64, rate=8.0, goodput={"fraction": 0.5})))
    lines = render_service_table(levels)
    assert max(map(len, lines)) <= WIDTH, "\n".join(lines)
    text = "\n".join(lines)
    assert "closed loop" in lines[-9] and "7.96 req/s" in lines[-9] and "8 req/s" in text
    assert "/7.96" not in text and "asked/got" not in text
    assert "test_service[Qwen3TTS-tiny-c1], test_service[Qwen3TTS-tiny-c4], test_service[Qwen3TTS-tiny-c16]: " \
           "goodput n/a: no targets given (x)" in " ".join(" ".join(lines).split())  # wrapped at 120
    assert "12.300 ms" in lines[2] and "12.346" not in text  # p50 in its own unit; means and p90s: the JSON
    assert any(line.startswith("goodput: requests meeting every target") for line in lines)


def test_a_goodput_reason_shared_by_every_level_is_one_line():
    levels = [(f"l{c}", _level(c, reasons={"goodput": "no targets given (x)"})) for c in (1, 2)]
    notes = [line for line in render_service_table(levels) if "goodput n/a" in line]
    assert notes == ["every level: goodput n/a: no targets given (x)"]


def test_a_real_session_table_fits_120_columns_with_its_footnotes(pytester):
    a = write_case(pytester.path, "lin", ["build_linear"])
    b = write_case(pytester.path, "np", ["build_numpy"])
    pytester.makepyfile(test_bench=BENCH_TEST)
    result = pytester.runpytest("-p", "no:cacheprovider", "--s2st-warmup=0", f"--s2st-config={a}",
                                f"--s2st-config={b}")
    result.assert_outcomes(passed=2)
    out = result.stdout.lines
    start = next(i for i, line in enumerate(out) if "s2st: runtime per sample" in line)
    end = next(i for i in range(start, len(out)) if out[i].startswith("=") or out[i].startswith("warning"))
    table = out[start + 1:end]
    assert table[0].split()[:2] == ["Name", "runtime"] and "methods" not in table[0]
    assert max(map(len, table)) <= WIDTH, "\n".join(table)
    assert any(line.startswith("methods: ") and "vmhwm" in line for line in table)
    assert any(line.startswith("note: test_inference[callable-np]: flops n/a: ") for line in table)


def test_help_shows_real_defaults_and_a_sentence_per_ini_option(pytester):
    result = pytester.runpytest("-p", "no:cacheprovider", "--help")
    text = "\n".join(result.stdout.lines)
    assert "s2st-concurrency" in text
    assert "(default: None)" not in text and "(default: (1,))" not in text and "ini twin of" not in text
    flat = " ".join(text.split())
    assert "(ids [<case>-c1] ...) (default: 1)" in flat
    assert "seconds of timed rounds --s2st-target-precision may spend (default: 60)" in flat
    assert "(default: samples x repeat) (default:" not in flat and "whichever is more; under" in flat
    # the ini option says what it sets and what wins over it
    assert "s2st_repeat (string): timed runs per sample (runtime is their mean) (default: 1); --s2st-repeat and " \
           "a config's general.repeat override it" in flat
    assert "s2st_plot (string): write a PNG per case" in flat and "--s2st-plot overrides it" in flat


def _plot_levels():
    from pytest_s2st.service.stats import summarize

    def rec(c, i):  # 2 s of audio in two chunks that arrive together: no underrun, no gap
        failed = c == 8 and i % 4 == 0  # a quarter of the top level fails, as a 503 would
        t0 = 0.05 * c
        return {"status": "error" if failed else "ok", "error": "HTTP 503" if failed else None, "sample_rate": 8000,
                "chunks": [[t0 + 0.1, 16000], [t0 + 0.1, 16000]], "audio_seconds": 2.0, "send_t": 0.0,
                "first_audio_t": t0 + 0.1, "done_t": t0 + 0.4 * c}

    levels = []
    for c in (1, 4, 8):
        summary = summarize([rec(c, i) for i in range(12)], 3.0, {"ttfa_s": 0.4})
        summary["achieved_rate"] = 4.0
        levels.append({"case": "tone", "concurrency": c, "summary": summary,
                       "budgets": {"ttfa_s_p99": 0.5, "error_rate": 0.1}})
    return levels


def test_plot_has_error_rate_throughput_n_per_level_rtf_1_and_budget_lines(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from pytest_s2st.plot import figure, plot_service

    levels = _plot_levels()
    fig = figure(plt, "tone", levels)
    axes = {ax.get_title(): ax for ax in fig.axes}
    assert list(axes) == ["time to first audio", "real-time factor (RTF)", "error rate", "throughput",
                          "playback underrun", "inter-chunk gap"]
    err = axes["error rate"].lines[0].get_ydata()
    assert list(err) == [0.0, 0.0, 25.0]  # 3 of 12 failed at c=8, in percent
    assert [t.get_text() for t in axes["error rate"].get_xticklabels()] == ["c=1\nn=12/12", "c=4\nn=12/12",
                                                                            "c=8\nn=9/12"]
    # throughput: 12 (c=1, c=4) or 9 (c=8) ok requests x 2 s of audio / 3 s of wall
    assert list(axes["throughput"].lines[0].get_ydata()) == pytest.approx([8.0, 8.0, 6.0])
    assert [t.get_text() for t in axes["throughput"].texts] == ["4.00 req/s"] * 3
    labels = lambda ax: ax.get_legend_handles_labels()[1]
    assert "RTF = 1 (real time)" in labels(axes["real-time factor (RTF)"])
    assert "budget ttfa_s_p99 = 0.5 s" in labels(axes["time to first audio"])
    assert "goodput target = 0.4 s" in labels(axes["time to first audio"])
    assert "budget error_rate = 10%" in labels(axes["error rate"])
    assert axes["playback underrun"].get_ylim() == (0.0, 0.1)  # all zeros: an axis from 0, not ±0.04
    assert any(t.get_text() == "0 at every level" for t in axes["playback underrun"].texts)
    plt.close(fig)
    (path,) = plot_service([("x", d) for d in levels], tmp_path)
    from PIL import Image

    assert Image.open(path).size == (1100, 1200)


# ------------------------------------------------------------------ every table a user sees within 120 columns

WIDE_TEST = '''
import torch

layer = torch.nn.Linear(80, 80)


@torch.inference_mode()
def my_model(x):
    return layer(x)


@torch.inference_mode()
def my_change(x):
    return layer(layer(x))


INPUTS = [torch.randn(frames, 80) for frames in (50, 100, 150, 200)]


def test_inference(s2st_pipeline, s2st_dataset, s2st_benchmark):
    s2st_benchmark(s2st_pipeline, s2st_dataset)


def test_my_change_against_my_model(s2st_benchmark):
    s2st_benchmark(my_change, INPUTS, baseline=my_model)
'''

# lines pytest-benchmark writes naming a file (their length is the path's), not tables
FILE_LINES = ("Saved benchmark data in: ", "Wrote benchmark data in: ", "Comparing against benchmarks from: ")


def _too_wide(lines: list[str]) -> list[str]:
    """The lines after pytest's header ("collected ...") wider than WIDTH, file-naming lines aside."""
    start = next(i for i, line in enumerate(lines) if line.startswith("collected "))
    return [f"{len(line)}: {line}" for line in lines[start:] if len(line) > WIDTH and not line.startswith(FILE_LINES)]


def test_every_table_of_a_saved_run_an_a_b_and_a_compare_fits_120_columns(pytester, monkeypatch):
    """The README's kinds of benchmark in 120 columns: pytest-benchmark's table (its ten default columns made it
    ~210-240 wide; the plugin picks median, IQR, rounds), the s2st table, the A/B and the compare of two saved
    runs (~190 wide in one line per benchmark: stacked then / now / change when that does not fit)."""
    monkeypatch.setenv("COLUMNS", str(WIDTH))  # what pytest's terminal writer reads
    configs = [write_case(pytester.path, name, ["build_linear"]) for name in ("a-case-with-a-long-name", "short")]
    pytester.makepyfile(test_wide=WIDE_TEST)
    args = ["-p", "no:cacheprovider", "--s2st-warmup=0", *(f"--s2st-config={c}" for c in configs)]
    first = pytester.runpytest(*args, "--benchmark-autosave")
    first.assert_outcomes(passed=3)
    assert _too_wide(first.stdout.lines) == [], "\n".join(first.stdout.lines)
    text = "\n".join(first.stdout.lines)
    assert re.search(r"Name \(time in .s\) +Median +IQR +Rounds\n", text)  # pytest-benchmark's, narrowed
    assert "s2st: A/B in one process" in text
    second = pytester.runpytest(*args, "--benchmark-compare")
    second.assert_outcomes(passed=3)
    lines = second.stdout.lines
    assert _too_wide(lines) == [], "\n".join(lines)
    start = next(i for i, line in enumerate(lines) if "s2st: compared with the saved run" in line)
    compare = lines[start + 1:]
    assert compare[0].split()[:2] == ["Name", "runtime"]
    name = next(line for line in compare if line.startswith("test_inference[callable-a-case-with-a-long-name]"))
    then = compare.index(name)
    assert name.split()[1] == "then" and compare[then + 1].split()[0] == "now"
    assert compare[then + 2].split()[0] == "change"


def test_a_user_s_benchmark_columns_win():
    from types import SimpleNamespace

    from pytest_s2st.benchmark_compat import BENCHMARK_COLUMNS, narrow_columns

    given, default = SimpleNamespace(option=SimpleNamespace(benchmark_columns=["min", "max"])), \
        SimpleNamespace(option=SimpleNamespace(benchmark_columns=None))
    narrow_columns(given), narrow_columns(default)
    assert given.option.benchmark_columns == ["min", "max"] and default.option.benchmark_columns == list(BENCHMARK_COLUMNS)


def test_fit_wraps_whole_columns_under_the_name():
    header = ["Name"] + [f"column {i}" for i in range(12)]
    body = [["test_a"] + [f"{i * 1000.5:.3f} ms" for i in range(12)], ["  stage"] + ["x"] * 12]
    from pytest_s2st.report import fit, table

    assert max(map(len, table(header, body))) > WIDTH
    lines = fit(header, body)
    assert max(map(len, lines)) <= WIDTH
    blocks = "\n".join(lines).split("\n\n")
    assert len(blocks) == 2 and all(block.startswith("Name ") for block in blocks)
    cells = [cell for block in blocks for line in block.splitlines()[2:] for cell in line.split("  ") if cell.strip()]
    assert sorted(c.strip() for c in cells if c.strip() not in ("test_a", "stage")) == sorted(body[0][1:] + body[1][1:])
    assert fit(header[:3], [row[:3] for row in body]) == table(header[:3], [row[:3] for row in body])  # narrow: as is


def test_compare_is_one_line_per_benchmark_when_it_fits_and_stacks_when_not():
    from pytest_s2st.report import render_compare

    old = {"flops": {"value": 1.6e6, "method": "torch"}, "rss_rise_mib": {"value": 250.0, "method": "vmhwm"}}
    new = {"flops": {"value": 3.2e6, "method": "torch"}, "rss_rise_mib": {"value": 260.0, "method": "vmhwm"}}
    rows = [Row("test_a", "a", new, key="a")]
    narrow = render_compare(rows, {"a": SavedRow.from_metrics(old)})
    assert len(narrow) == 3 and "250.0 MiB -> 260.0 MiB (+4.0%)" in narrow[2]
    stacked = render_compare(rows, {"a": SavedRow.from_metrics(old)}, width=40)
    assert [line.split()[:2] for line in stacked[2:]] == [["test_a", "then"], ["now", "260.0"], ["change", "+4.0%"]]
    assert stacked[0].split() == ["Name", "RSS", "rise", "FLOPs"] and max(map(len, stacked)) <= 40


# ------------------------------------------------------------------ plots: one line per test, the baseline overlaid

def _level_of(case, c, ttfa, n_ok=12, role=None):
    summary = {"n": 12, "n_ok": n_ok, "error_rate": (12 - n_ok) / 12, "throughput": 2.0 * c, "achieved_rate": 1.0,
               "ttfa_s": {"p50": ttfa, "p90": 1.5 * ttfa, "p99": 2 * ttfa}, "reasons": {}}
    return {"case": case, "concurrency": c, "summary": summary, **({"role": role} if role else {})}


def test_two_tests_on_one_case_are_two_lines_and_the_baseline_is_overlaid_on_one_scale(tmp_path):
    """Before: one PNG per case with the levels of every test sorted into one zig-zag line, and the baseline (its own
    case) in a PNG of its own on its own scale."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from pytest_s2st.plot import figure, figures, panel_data, plot_service, series_name

    assert series_name("test_a[tts-c4]", 4) == "test_a[tts]" and series_name("test_a[c4]", 4) == "test_a"
    results = []
    for c in (1, 4):  # the order a session finishes them in: the tests interleave
        results.append((f"test_a[tts-c{c}] (baseline base)", _level_of("base", c, 0.5 * c, role="baseline")))
        results.append((f"test_a[tts-c{c}]", _level_of("tts", c, 0.1 * c, n_ok=9 if c == 4 else 12)))
        results.append((f"test_b[tts-c{c}]", _level_of("tts", c, 0.2 * c)))
    grouped = figures(results)
    assert list(grouped) == ["tts"]  # the baseline joins its candidate's figure
    series = grouped["tts"]
    assert [(one.label, one.baseline) for one in series] == [("test_a[tts] (baseline base)", True),
                                                             ("test_a[tts]", False), ("test_b[tts]", False)]
    ttfa = panel_data(series[1], "ttfa_s")
    assert ttfa["x"] == [1, 4] and ttfa["y"] == [0.1, 0.4] and ttfa["high"] == pytest.approx([0.15, 0.6])
    errors = panel_data(series[1], "error_rate")  # 3 of 12 failed at c=4: 25% inside its Wilson interval
    assert errors["y"] == [0.0, 25.0] and errors["low"][1] < 25.0 < errors["high"][1] and errors["low"][0] == 0.0
    fig = figure(plt, "tts", series)
    ax = next(ax for ax in fig.axes if ax.get_title() == "time to first audio")
    drawn = {line.get_label(): line for line in ax.lines if not line.get_label().startswith("_")}
    assert set(drawn) == {"test_a[tts] (baseline base)", "test_a[tts]", "test_b[tts]"}
    for label, line in drawn.items():  # one monotonic line per test: no zig-zag between tests
        assert list(line.get_xdata()) == [1, 4], label
    assert drawn["test_a[tts] (baseline base)"].get_linestyle() == "--" and drawn["test_a[tts]"].get_linestyle() == "-"
    assert list(drawn["test_a[tts] (baseline base)"].get_ydata()) == [0.5, 2.0]  # on the same axes as the candidate
    assert len(ax.collections) == 3  # a p50-p90 band per series
    assert [t.get_text() for t in ax.get_xticklabels()] == ["c=1\nn=12/12 | 12/12 | 12/12", "c=4\nn=12/12 | 9/12 | 12/12"]
    plt.close(fig)
    assert [p.name for p in plot_service(results, tmp_path / "plots")] == ["tts.png"]


def test_a_relative_plot_dir_is_under_the_rootdir_with_the_evidence(pytester, monkeypatch):
    from helpers import write_tone_case

    cfg = write_tone_case(pytester.path, general_extra="workload: wl.jsonl\nconcurrency: [1]\nwarmup: 0\n")
    (pytester.path / "wl.jsonl").write_text('{"id": "u0", "text": "hello", "language": "en", "voice": "a", "seed": 0}\n')
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(test_service='''
def test_service(s2st_service, s2st_workload, s2st_concurrency, s2st_load):
    s2st_load(s2st_service, s2st_workload, concurrency=s2st_concurrency)
''')
    elsewhere = pytester.mkdir("elsewhere")
    monkeypatch.chdir(elsewhere)
    result = pytester.runpytest("-p", "no:cacheprovider", f"--s2st-config={cfg}", "--s2st-plot=plots",
                                str(pytester.path / "test_service.py"))
    result.assert_outcomes(passed=1)
    assert (pytester.path / "plots" / "callable-tts.png").is_file() and not (elsewhere / "plots").exists()
    assert (pytester.path / ".s2st-runs").is_dir()  # the evidence's root: the same
    result.stdout.fnmatch_lines([f"plot: {pytester.path / 'plots' / 'callable-tts.png'}"])


def test_change_cells_speak_one_vocabulary_and_call_rss_noise_noise():
    """Change cells read '(=)', '(was 0)' or '+300.0%' on a few KiB of RSS before (issue 32 item 7): now a signed
    percent, 'from 0', or, for an RSS metric moving less than its noise floor, '<1 MiB: noise'."""
    from pytest_s2st.report import pct_change

    assert pct_change(0.0, 0.0, "peak_delta_mib") == pct_change(0.004, 0.016, "peak_delta_mib") == "<1 MiB: noise"
    assert pct_change(251.0, 251.3, "peak_rss_mib") == "<1 MiB: noise"
    assert pct_change(100.0, 150.0, "rss_rise_mib") == "+50.0%"
    assert pct_change(62.5 / 1024, 125 / 1024, "tensor_peak_mib") == "+100.0%"  # deterministic: no floor
    assert pct_change(1.6e6, 1.6e6, "flops") == "+0.0%" and pct_change(0.0, 3.2e6, "flops") == "from 0"
    assert pct_change(None, 1.0, "flops") == "n/a"
