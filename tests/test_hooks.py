"""pytest-s2st's hooks (hookspec.py) implemented by real conftest plugins, in real sessions (pytester): a metric a
plugin adds to each row is in the saved JSON and the table, a job summary is written from the final rows, a
line appended to the table is printed; under pytest-xdist too. And docs/writing.md's example runs as written."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

FAST = ["-p", "no:cacheprovider", "--s2st-warmup=0", "--s2st-min-rounds=2"]
XDIST = ["-p", "xdist", "-n", "2"]
DOCS = Path(__file__).resolve().parents[1] / "docs" / "writing.md"

BENCHMARKS = '''
def double(x):
    return [v * 2 for v in x]


def test_double(s2st_benchmark):
    s2st_benchmark(double, [[1.0, 2.0], [3.0, 4.0]])


def test_triple(s2st_benchmark):
    s2st_benchmark(lambda x: [v * 3 for v in x], [[1.0, 2.0]])
'''

PLUGIN = '''
import os

from pytest_s2st.measure.record import Metric


def pytest_s2st_row_measured(config, item, measurement):
    # chrF is a row of the metric table: it shows in the JSON's metrics and the extra table
    measurement.quality["chrf"] = Metric(42.5, "conftest scorer", details={"test": item.name})
    measurement.info["measured_in"] = os.environ.get("PYTEST_XDIST_WORKER", "main")


def pytest_s2st_session_ready(config, rows, verdicts):
    with open(os.environ["JOB_SUMMARY"], "a", encoding="utf-8") as summary:
        summary.write("| benchmark | chrF | verdict |\\n|---|---|---|\\n")
        for row in rows:
            summary.write(f"| {row.nodeid} | {row.measurement['metrics']['chrf']['value']} | {row.verdict or '-'} |\\n")
        summary.write(f"inconclusive: {len(verdicts.inconclusive)}, regressions: {len(verdicts.regressions)}\\n")


def pytest_s2st_table(config, name, lines):
    lines.append(f"table {name}: {len(lines)} line(s) from pytest-s2st, this one from conftest.py")
'''


def docs_block(tag: str) -> str:
    match = re.search(rf"^<!-- {re.escape(tag)} -->\n```[a-z]*\n(.*?)^```$", DOCS.read_text(), re.S | re.M)
    assert match, f"docs/writing.md has no block tagged {tag!r}"
    return match.group(1)


def saved(pytester) -> dict:
    return {b["name"]: b["extra_info"]["s2st"] for b in json.loads((pytester.path / "out.json").read_text())["benchmarks"]}


def run(pytester, monkeypatch, *args: str):
    summary = pytester.path / "summary.md"
    monkeypatch.setenv("JOB_SUMMARY", str(summary))
    pytester.makeconftest(PLUGIN)
    pytester.makepyfile(test_bench=BENCHMARKS)
    result = pytester.runpytest_subprocess(*FAST, "--benchmark-json=out.json", *args)
    result.assert_outcomes(passed=2)
    return result, summary


def check(result, summary: Path, pytester, where: str) -> None:
    rows = saved(pytester)
    assert set(rows) == {"test_double", "test_triple"}
    for name, row in rows.items():
        assert row["metrics"]["chrf"] == {"value": 42.5, "method": "conftest scorer", "details": {"test": name}}
        assert row["measured_in"].startswith(where)
    text = result.stdout.str()
    assert "chrF" in text and "42.50" in text  # the metric's column in the extra table
    assert re.search(r"^table inference: \d+ line\(s\) from pytest-s2st, this one from conftest.py$", text, re.M), text
    lines = summary.read_text().splitlines()
    assert lines[:2] == ["| benchmark | chrF | verdict |", "|---|---|---|"]  # written once, by one process
    assert sorted(lines[2:4]) == ["| test_bench.py::test_double | 42.5 | - |", "| test_bench.py::test_triple | 42.5 | - |"]
    assert lines[4:] == ["inconclusive: 0, regressions: 0"]


def test_hooks_add_a_metric_write_a_summary_and_a_table_line(pytester, monkeypatch):
    result, summary = run(pytester, monkeypatch)
    check(result, summary, pytester, "main")


def test_hooks_under_xdist_rows_in_the_workers_summary_on_the_controller(pytester, monkeypatch):
    pytest.importorskip("xdist")
    result, summary = run(pytester, monkeypatch, *XDIST)
    check(result, summary, pytester, "gw")


def test_a_metric_the_table_lacks_fails_the_test_with_one_line(pytester):
    pytester.makeconftest('''
from pytest_s2st.measure.record import Metric


def pytest_s2st_row_measured(config, item, measurement):
    measurement.quality["my_score"] = Metric(1.0, "mine")
''')
    pytester.makepyfile(test_bench=BENCHMARKS)
    result = pytester.runpytest_subprocess(*FAST, "-k", "double")
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    assert "metric(s) 'my_score' not in the metric table (pytest_s2st/metrics.py METRICS)" in text
    assert "Traceback" not in text


def test_the_documented_example_writes_a_job_summary(pytester, monkeypatch):
    summary = pytester.path / "step-summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    pytester.makeconftest(docs_block("example: hooks"))
    pytester.makepyfile(test_bench=BENCHMARKS)
    result = pytester.runpytest_subprocess(*FAST, "--benchmark-json=out.json")
    result.assert_outcomes(passed=2)
    lines = summary.read_text().splitlines()
    assert lines[:2] == ["| benchmark | runtime per sample | verdict |", "|---|---|---|"]
    assert len(lines) == 4 and all(re.fullmatch(r"\| `test_bench.py::test_\w+` \| [\d.]+ [mun]?s \| - \|", line)
                                   for line in lines[2:]), lines
    assert re.search(r"^measured on Python \d", result.stdout.str(), re.M)
    assert all(row["python"] for row in saved(pytester).values())


def test_an_export_that_cannot_write_fails_the_session_naming_its_file(pytester):
    """An export's failure is not a silent pass: it appends to verdicts.not_written, the session fails with
    exit 1 and lists the line, the rows measured are still shown."""
    pytester.makepyfile(test_bench=BENCHMARKS)
    pytester.makeconftest('''
def pytest_s2st_session_ready(config, rows, verdicts):
    verdicts.not_written.append("job summary: /nowhere/summary.md not written (No such file or directory)")
''')
    result = pytester.runpytest(*FAST)
    assert result.ret == 1
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*s2st files not written*", "job summary: /nowhere/summary.md not written*",
                                 "*2 passed*1 not written*"])
    assert "s2st: runtime per sample" in result.stdout.str()


# ------------------------------------------------------------------ a hook that raises: one line, the tables kept

RAISES = '''
def pytest_s2st_row_measured(config, item, measurement):
    raise RuntimeError("boom")


def pytest_s2st_session_ready(config, rows, verdicts):
    raise RuntimeError("boom")


def pytest_s2st_table(config, name, lines):
    raise RuntimeError("boom")
'''
# hook name -> the line of its raise in conftest.py (makeconftest drops the leading blank line)
_SOURCE = RAISES.strip().splitlines()
LINES = {_SOURCE[n - 2].split("pytest_s2st_")[1].split("(")[0]: n
         for n, line in enumerate(_SOURCE, 1) if line.strip().startswith("raise")}


def raising_session(pytester, *args: str):
    pytester.makeconftest(RAISES)
    pytester.makepyfile(test_bench=BENCHMARKS)
    return pytester.runpytest_subprocess(*FAST, *args)


def assert_raised_lines(result, failed_tests: int) -> str:
    text = result.stdout.str() + result.stderr.str()
    assert "Traceback" not in text and "INTERNALERROR" not in text and 'raise RuntimeError("boom")' not in text, text
    assert result.ret == pytest.ExitCode.TESTS_FAILED, text
    assert "s2st: runtime per sample" in text and "test_double" in text and "test_triple" in text  # the table
    assert re.search(rf"= {failed_tests} failed, .*2 raised in a hook in ", text), text  # counted on the last line
    for name, line in LINES.items():
        found = [t for t in text.splitlines()
                 if f"pytest_s2st_{name}: conftest.py:{line} (pytest_s2st_{name}) raised RuntimeError: boom" in t]
        assert found, (name, line, text)
    return text


def test_a_hook_that_raises_is_one_line_and_every_table_is_printed(pytester):
    """Each of the three hooks raising: the row's test fails with one line naming pytest_s2st_row_measured and
    conftest.py:LINE (the row is kept); session_ready's and the table's line are listed after the tables; exit 1."""
    result = raising_session(pytester)
    result.assert_outcomes(failed=2)
    text = assert_raised_lines(result, failed_tests=2)
    assert "s2st hooks that raised" in text and "(table 'inference')" in text
    assert LINES == {"row_measured": 2, "session_ready": 6, "table": 10}


def test_a_hook_that_raises_in_an_xdist_worker_is_one_line_too(pytester):
    pytest.importorskip("xdist")
    result = raising_session(pytester, *XDIST)
    result.assert_outcomes(failed=2)
    assert_raised_lines(result, failed_tests=2)
