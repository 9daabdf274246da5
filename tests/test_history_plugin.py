"""--s2st-history through pytest as users run it: the session's rows appended once (also under xdist), bad options
refused before any test runs, a history that cannot be written fails the session without losing the tables; and
`s2st-history links` for a pull request's summary."""
from __future__ import annotations

import subprocess
import sys

import pytest

from pytest_s2st.history.store import open_store

MODEL = '''
def model(x):
    return sum(range(2000)) + x


def test_model(s2st_benchmark):
    s2st_benchmark(model, [1, 2, 3, 4])
'''


def test_a_session_appends_its_rows_once_and_says_where(pytester, tmp_path):
    pytester.makepyfile(test_bench=MODEL)
    db = tmp_path / "h.sqlite"
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", f"--s2st-history={db}", "--s2st-min-rounds=5")
    assert result.ret == 0
    result.stdout.re_match_lines([r"-+ s2st history -+", rf"\d+ value\(s\) of 1 benchmark\(s\) kept in {db} \(run 1\)"])
    with open_store(db) as store:
        assert store.run_count() == 1
        assert {k.metric for k in store.keys()} >= {"runtime_s", "rss_rise_mib", "peak_delta_mib"}


def test_a_sessions_history_equals_an_import_of_its_saved_json(pytester, tmp_path):
    """The session's rows reach the history as the pytest-benchmark document they are saved as, read by the one
    reader `s2st-history import` uses: what a session keeps and what importing its --benchmark-json keeps are
    the same series, value for value (a second reader of the typed rows could drift from the saved file's)."""
    from pytest_s2st.cli import history as cli

    pytester.makepyfile(test_bench=MODEL)
    live, imported, saved = tmp_path / "live.sqlite", tmp_path / "imported.sqlite", tmp_path / "run.json"
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", f"--s2st-history={live}", "--s2st-min-rounds=5",
                                          f"--benchmark-json={saved}")
    assert result.ret == 0
    assert cli.main(["--db", str(imported), "import", str(saved)]) == 0

    def series(db):
        with open_store(db) as store:
            return {key: [(e.point.value, e.point.low, e.point.high) for e in store.series(key)]
                    for key in store.keys()}

    kept = series(live)
    assert len(kept) >= 3 and kept == series(imported)


def test_xdist_workers_leave_the_append_to_the_controller(pytester, tmp_path):
    pytester.makepyfile(test_bench=MODEL + MODEL.replace("test_model", "test_other"))
    db = tmp_path / "h.sqlite"
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "2", f"--s2st-history={db}", "--s2st-min-rounds=5")
    assert result.ret == 0, result.stdout.str()
    with open_store(db) as store:
        assert store.run_count() == 1
        assert {k.benchmark for k in store.keys()} == {"test_bench.py::test_model", "test_bench.py::test_other"}


@pytest.mark.parametrize("args, line", [
    (["--s2st-history-fail=runtime_s"], "--s2st-history-fail: judges new values against the history; name the "
                                        "history with --s2st-history URL"),
    (["--s2st-history=mysql://h/db"], "must be a path, sqlite:///PATH"),
    (["--s2st-history=h.sqlite", "--s2st-history-fail=runtime:t"], "'runtime' is not a metric"),
    (["--s2st-history=h.sqlite", "--s2st-history-fail=runtime_s:t:2"], "the boundary must be a quantile in (0.5, 1)"),
    (["--s2st-history=h.sqlite", "--s2st-history-window=0"], "must be an integer > 0, got '0'"),
])
def test_bad_history_options_are_usage_errors_before_any_test(pytester, args, line):
    pytester.makepyfile(test_bench=MODEL)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert line in result.stderr.str() and "Traceback" not in result.stderr.str() + result.stdout.str()
    assert "passed" not in result.stdout.str()


def test_a_history_that_cannot_be_written_fails_the_session_and_keeps_the_tables(pytester, tmp_path):
    pytester.makepyfile(test_bench=MODEL)
    folder = tmp_path / "a-folder"
    folder.mkdir()
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", f"--s2st-history={folder}", "--s2st-min-rounds=5")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    out = result.stdout.str()
    assert "s2st: runtime per sample" in out and "1 passed" in out  # what was measured is printed
    assert f"not kept: {folder}: the history database is not a regular file" in out
    assert "Traceback" not in out


def test_links_point_at_each_collected_tests_trend_page(pytester):
    pytester.makepyfile(test_bench=MODEL)
    collected = pytester.runpytest_subprocess("--collect-only", "-q", "-p", "no:cacheprovider").stdout.str()
    links = subprocess.run([sys.executable, "-m", "pytest_s2st.cli.history", "links", "https://o.github.io/r/"],
                           input=collected, capture_output=True, text=True, check=True).stdout.splitlines()
    assert links == ["| benchmark | trend |", "|---|---|",
                     "| `test_bench.py::test_model` | [history](https://o.github.io/r/all/test_bench.py__test_model-"
                     + links[2].rsplit("-", 1)[1]]
    assert links[2].endswith(".html) |")
