"""The code-version A/B (--s2st-ab-base REF) and the calibrated A/B rounds: the statistics and the round sizing on
hand-made numbers, the worker command line, the worktree's life, then real pytest sessions on real git
repositories, as a user runs them."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from helpers import BUSY_BENCH, BUSY_MODEL
from helpers import git as _git
from helpers import git_repo as _repo

from pytest_s2st.errors import S2STError
from pytest_s2st.measure.device import resolve_device
from pytest_s2st.rounds import MAX_CALLS_PER_ROUND, RoundPolicy, TimedRounds, calls_per_round
from pytest_s2st.ab.estimators import compare_pair_sets, compare_pairs
from pytest_s2st.significance import FASTER, SAME, SLOWER
from pytest_s2st.versions import channel
from pytest_s2st.versions.driver import worker_args
from pytest_s2st.versions.worktree import Worktree


def test_pairs_that_agree_keep_the_pooled_interval():
    base = [1.0] * 20
    one = [1.10 + 0.001 * i for i in range(20)]
    two = [1.1005 + 0.001 * i for i in range(20)]
    change = compare_pair_sets([(base, one), (base, two)])
    pooled = compare_pairs(base + base, one + two)
    assert (change.ratio, change.low, change.high) == (pooled.ratio, pooled.low, pooled.high)
    assert change.word == SLOWER and change.pairs == 40


def test_pairs_that_disagree_widen_the_interval_to_their_medians():
    """Two worker pairs, each tight, one x0.97 and one x1.04 (each process's layout): pooled, the interval would
    exclude 1; widened to hold both pairs' medians, no word."""
    base = [1.0] * 20
    low = [0.97 + 0.0001 * i for i in range(20)]
    high = [1.04 + 0.0001 * i for i in range(20)]
    assert compare_pairs(base + base, low + high).low > 0.97  # the pooled interval alone
    change = compare_pair_sets([(base, low), (base, high)])
    assert change.low <= compare_pairs(base, low).ratio and change.high >= compare_pairs(base, high).ratio
    assert change.word == SAME
    assert compare_pair_sets([(base, [r / 2 for r in low]), (base, [r / 2 for r in high])]).word == FASTER
    assert compare_pair_sets([(base, low[:-1] + [float("nan")])]).ratio is None  # missing evidence, no ratio


@pytest.mark.parametrize("per_call, samples, calls", [
    (0.001, 4, 100),          # 0.1 s of 1 ms calls: 25 passes over 4 samples
    (0.001, 3, 102),          # past the dataset: whole passes (100 -> 102)
    (0.03, 4, 4),             # ceil(0.1 / 0.03) = 4
    (0.03, 50, 4),            # fewer calls than samples: the rounds walk the dataset
    (1.0, 4, 1),              # a call longer than the target: one a round
    (0.0, 4, MAX_CALLS_PER_ROUND),  # too fast for the clock
    (float("nan"), 4, MAX_CALLS_PER_ROUND),
])
def test_calls_per_round(per_call, samples, calls):
    assert calls_per_round(per_call, 0.1, samples) == calls


class _Stage:
    def __init__(self, log):
        self.name, self.log = "s", log

    def forward(self, x):
        self.log.append(x)


def test_a_round_of_several_calls_walks_the_samples_and_records_per_sample_means():
    log: list = []
    clock = iter(range(1000))
    rounds = TimedRounds([_Stage(log)], [[0, 1, 2, 3, 4]], resolve_device("cpu"), 1, timer=lambda: next(clock),
                         policy=RoundPolicy(2))
    rounds.calls = 3
    rounds.run_all()
    assert log == [0, 1, 2, 3, 4, 0]  # round 1: samples 0-2; round 2: 3, 4, then 0
    assert rounds.round_totals == [1.0, 1.0]  # each call took one tick: the per-sample mean of the round


def test_the_rounds_are_forty_ratios_shared_by_the_pairs_unless_asked():
    from pytest_s2st.plugin_versions import version_rounds

    assert [version_rounds(p, None) for p in (1, 2, 3, 4)] == [160, 80, 54, 40]
    assert version_rounds(1, 6) == 6 and version_rounds(2, 30) == 30  # --s2st-min-rounds: per pair, as given


def test_only_the_first_pair_runs_the_untimed_passes():
    """The row is the first pair's measurement: the workers of later pairs time their rounds and nothing else (no
    memory, FLOPs, tensor or instruction pass), whatever the session asked."""
    from pytest_s2st.plugin_versions import worker_settings
    from pytest_s2st.settings import BY_NAME

    assert worker_settings({"side": "head", "pair": 0}) == {"summary": None}  # the controller's summary alone
    assert worker_settings({"side": "base", "pair": 0}) == {"summary": None, "dump_dir": None}
    later = worker_settings({"side": "base", "pair": 1})
    assert later == {"memory": "off", "flops": "off", "tensor_memory": "off", "instructions": "off", "summary": None,
                     "dump_dir": None}
    assert all(BY_NAME[name].parse(value) == value for name, value in later.items() if value is not None)
    assert all(BY_NAME[name].default is None for name, value in later.items() if value is None)


def test_worker_args_drop_what_writes_or_judges_results_and_keep_the_rest():
    args = ["benchmarks/", "--s2st-ab-base", "origin/main", "--s2st-ab-pairs=3", "-n", "2", "-n4",
            "--benchmark-json", "out.json", "--junitxml=j.xml", "--s2st-compare-fail=runtime_s:5%", "-k", "model",
            "--s2st-config=staged/S2UT.yaml", "--s2st-ab-round-s", "0.2", "-q", "--s2st-ab-estimator", "median"]
    assert worker_args(args) == ["benchmarks/", "-k", "model", "--s2st-config=staged/S2UT.yaml",
                                 "--s2st-ab-round-s", "0.2", "-q"]


def test_every_worker_that_connects_at_once_is_accepted():
    """Workers that connect before the controller accepts any: each must get its handshake (a listener's accept
    queue of 1 dropped all but a few, and those workers then waited for ever; the guard below only bounds a hang)."""
    listener, key = channel.listener(16)
    spec = {"address": list(listener.address), "key": key.hex()}
    clients = [threading.Thread(target=lambda i=i: channel.send(channel.connect(spec), {"i": i}), daemon=True)
               for i in range(16)]
    for client in clients:
        client.start()
    time.sleep(0.5)  # every connection waits in the queue before the first accept
    got: list = []

    def accept() -> None:
        while len(got) < 16:
            got.append(channel.receive(listener.accept(), 30))

    threading.Thread(target=accept, daemon=True).start()
    deadline = time.monotonic() + 60
    while len(got) < 16 and time.monotonic() < deadline:
        time.sleep(0.05)
    listener.close()
    assert sorted(m["i"] for m in got) == list(range(16))


def test_the_base_reads_its_own_files_wherever_the_head_named_them(tmp_path):
    """Relative or absolute, a path in the repository is the base's own file; a tracked file the base lacks is
    dropped and named; an untracked test file is copied into the base's tree (its imports are the base's); other
    untracked files (a staged model's config) are the head's, read by both."""
    from pytest_s2st.versions.paths import BasePaths

    repo = _repo(tmp_path / "repo", {"model.py": "base\n", "test_bench.py": "base\n"})
    _commit(repo, {"model.py": "head\n", "test_new.py": "head\n"})
    (repo / "staged").mkdir()
    (repo / "staged" / "S2UT.yaml").write_text("{}")
    (repo / "test_untracked.py").write_text("import model\n")
    tree = Worktree(repo, "main")
    try:
        paths = BasePaths(tree, repo)
        placed = paths.args([str(repo), str(repo / "test_bench.py") + "::test_model", "test_bench.py", "test_new.py",
                             "test_untracked.py", "--s2st-config=staged/S2UT.yaml", "-k", "model", outside := str(
                                 tmp_path)])
        assert placed == [str(tree.path), str(tree.path / "test_bench.py") + "::test_model", "test_bench.py",
                          "test_untracked.py", f"--s2st-config={repo / 'staged' / 'S2UT.yaml'}", "-k", "model",
                          outside]
        assert (tree.path / "test_untracked.py").read_text() == "import model\n"
        assert paths.absent == ["test_new.py"] and paths.copied == ["test_untracked.py"]
        assert paths.shared == ["staged/S2UT.yaml"]
        alone = BasePaths(tree, repo)
        assert alone.args(["test_new.py", "-q"]) == ["-q", str(tree.path / "test_new.py")]  # its pytest names it
    finally:
        tree.close()


def _commit(root: Path, files: dict[str, str], message: str = "head") -> None:
    """A commit on branch pr (the pull request), off main (its base)."""
    if "pr" not in _git(root, "branch", "--list", "pr"):
        _git(root, "checkout", "-q", "-b", "pr")
    for name, text in files.items():
        (root / name).write_text(text)
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", message, "--allow-empty")


def test_the_worktree_is_the_revision_and_goes_away(tmp_path):
    repo = _repo(tmp_path / "repo", {"a.txt": "base\n"})
    _commit(repo, {"a.txt": "head\n"})
    tree = Worktree(repo / ".", "HEAD~1")
    assert (tree.path / "a.txt").read_text() == "base\n" and tree.sha != tree.head_sha
    assert tree.mapped(repo / "a.txt") == tree.path / "a.txt" and tree.mapped(tmp_path) == tmp_path
    tree.close()
    tree.close()  # once only
    assert not tree.parent.exists() and str(tree.path) not in _git(repo, "worktree", "list")


@pytest.mark.parametrize("ref, says", [("no-such-branch", "no such commit"), ("--exec=true", "a revision, not an option")])
def test_a_bad_revision_is_one_line(tmp_path, ref, says):
    repo = _repo(tmp_path / "repo", {"a.txt": "x\n"})
    with pytest.raises(S2STError, match=says):
        Worktree(repo, ref)


def test_outside_a_repository_is_one_line(tmp_path):
    with pytest.raises(S2STError, match="not inside a git repository"):
        Worktree(tmp_path, "main")


MODEL, BENCH = BUSY_MODEL, BUSY_BENCH



def _run(repo: Path, *args: str, timeout: float = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}, **(env or {})}
    env["COLUMNS"] = "200"
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_usage_errors_come_before_any_test(tmp_path):
    repo = _repo(tmp_path / "repo", {"model.py": MODEL.format(delay=0.001), "test_bench.py": BENCH})
    done = _run(repo, "--s2st-ab-base", "nope")
    assert done.returncode == 4 and "--s2st-ab-base 'nope': no such commit" in done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    done = _run(repo, "--s2st-ab-base", "main", "--s2st-ab-pairs", "0")
    assert done.returncode == 4 and "--s2st-ab-pairs" in done.stderr
    assert "s2st-ab-base" not in _git(repo, "worktree", "list")


def test_workers_start_only_for_a_run_that_runs_benchmarks(tmp_path):
    """The workers start beside the controller's collection: --collect-only starts none; a selection with no s2st
    benchmark ends them before they run anything (a plain test runs in the controller as usual)."""
    repo = _repo(tmp_path / "repo", {"model.py": MODEL.format(delay=0.001), "test_bench.py": BENCH,
                                     "test_plain.py": "def test_plain():\n    assert True\n"})
    listed = _run(repo, "--s2st-ab-base", "main", "--co", "-q")
    assert listed.returncode == 0 and "test_bench.py::test_model" in listed.stdout, listed.stdout[-2000:]
    assert not list(repo.glob(".s2st-runs/*/ab-workers")), "--collect-only started workers"
    plain = _run(repo, "--s2st-ab-base", "main", "test_plain.py")
    assert plain.returncode == 0 and "1 passed" in plain.stdout, plain.stdout[-2000:]
    logs = list(repo.glob(".s2st-runs/*/ab-workers/*.log"))
    assert len(logs) == 2 and not any("passed" in log.read_text() for log in logs)  # started, ran nothing
    assert _git(repo, "worktree", "list").count("\n") == 1


BROKEN = '''
def broken(x):
    raise ValueError("the base is broken")


def test_broken(s2st_benchmark):
    s2st_benchmark(broken, [1, 2])
'''


def test_a_benchmark_the_base_lacks_or_fails_is_inconclusive_and_the_worktree_goes(tmp_path):
    repo = _repo(tmp_path / "repo", {"model.py": MODEL.format(delay=0.001), "test_bench.py": BENCH,
                                     "test_broken.py": BROKEN})
    _commit(repo, {"test_new.py": BENCH.replace("test_model", "test_new"),
                   "test_broken.py": BROKEN.replace("raise ValueError(\"the base is broken\")", "return x")})
    done = _run(repo, "--s2st-ab-base", "main", "--s2st-ab-pairs", "1", "--s2st-min-rounds", "6",
                "--s2st-ab-round-s", "0.01", "-rA")
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    assert "1 passed, 2 inconclusive" in out, out[-3000:]
    assert "no A/B verdict: base: no such benchmark there" in out
    assert "no A/B verdict: base: call failed: stage 'stage1': the model raised ValueError: the base is broken" in out
    assert "Traceback" not in out
    assert _git(repo, "worktree", "list").count("\n") == 1  # the head alone
    strict = _run(repo, "--s2st-ab-base", "main", "--s2st-ab-pairs", "1", "--s2st-min-rounds", "6",
                  "--s2st-ab-round-s", "0.01", "--s2st-strict", "test_new.py")
    assert strict.returncode == 1, strict.stdout[-3000:]


SYNTAX_BASE = "def test_syntax(s2st_benchmark)\n    s2st_benchmark(abs, [1])\n"  # the colon is missing
SYNTAX_HEAD = "def test_syntax(s2st_benchmark):\n    s2st_benchmark(abs, [1])\n"
IMPORT_BASE = "import no_such_module\n\n\ndef test_imports(s2st_benchmark):\n    s2st_benchmark(abs, [1])\n"
IMPORT_HEAD = "def test_imports(s2st_benchmark):\n    s2st_benchmark(abs, [1])\n"
GUARD = """import os
import sys

sys.path.insert(0, os.environ["S2ST_TEST_HEAD_DIR"])  # both sides would import the head's model
from guarded import model


def test_guard(s2st_benchmark):
    s2st_benchmark(model, [1, 2, 3, 4])
"""
AB = ("--s2st-ab-pairs", "1", "--s2st-min-rounds", "6", "--s2st-ab-round-s", "0.01", "-rA")


def _verdicts(out: str) -> dict[str, str]:
    """Each benchmark's row of the A/B table and, where it has none, its reason, by test name."""
    import re

    table = out[out.index("A/B of code versions"):]
    rows = {m.group(1): line for line in table.splitlines() for m in [re.match(r"(test_\w+)\s", line)] if m}
    for m in re.finditer(r"::(test_\w+):\n\s+no A/B verdict: (.*)", out):
        rows[m.group(1)] += " | " + m.group(2)
    return rows


def test_the_base_never_runs_the_heads_code_and_names_each_failure(tmp_path):
    """The base's model takes 4 ms, the head's 1 ms: every compared benchmark reads faster (never the head against
    itself), however the paths were named (the repository or its file as absolute paths, an untracked test file);
    a base with a syntax error, a failed import, a benchmark it lacks, or a model imported from the head's tree
    is INCONCLUSIVE with one line naming why."""
    repo = _repo(tmp_path / "repo", {"model.py": MODEL.format(delay=0.004), "test_bench.py": BENCH,
                                     "test_syntax.py": SYNTAX_BASE, "test_imports.py": IMPORT_BASE,
                                     "test_guard.py": GUARD, "guarded.py": MODEL.format(delay=0.004)})
    _commit(repo, {"model.py": MODEL.format(delay=0.001), "guarded.py": MODEL.format(delay=0.001),
                   "test_syntax.py": SYNTAX_HEAD,
                   "test_imports.py": IMPORT_HEAD, "test_new.py": BENCH.replace("test_model", "test_new")})
    env = {"S2ST_TEST_HEAD_DIR": str(repo)}
    whole = _run(repo, str(repo), "--s2st-ab-base", "main", *AB, "--benchmark-json=ab.json", env=env)
    out = whole.stdout + whole.stderr
    lines = _verdicts(out)
    assert "faster" in lines["test_model"], out[-4000:]
    import json

    rows = {r["name"]: r["extra_info"]["s2st"]["ab"] for r in json.loads((repo / "ab.json").read_text())["benchmarks"]}
    # rounds sized on the slower side (the base, 4 ms a call): ceil(0.01 s / 4 ms) = 3 calls (sized on the head's
    # 1 ms it would be 12: whole passes over the 4 samples)
    assert rows["test_model"]["calls_per_round"] <= 4, rows["test_model"]
    assert "base: collecting test_syntax.py failed: SyntaxError" in lines["test_syntax"], out[-4000:]
    assert "test_syntax.py:1)" in lines["test_syntax"]
    assert ("base: collecting test_imports.py failed: ModuleNotFoundError: No module named 'no_such_module' "
            "(test_imports.py:1)") in lines["test_imports"], out[-4000:]
    assert "base: its model module was imported from the head's tree" in lines["test_guard"], out[-4000:]
    assert "base: no such benchmark there" in lines["test_new"]
    assert "Traceback" not in out

    (repo / "test_untracked.py").write_text(BENCH.replace("test_model", "test_untracked"))
    named = _run(repo, str(repo / "test_bench.py"), "test_new.py", "test_untracked.py", "--s2st-ab-base", "main",
                 *AB, env=env)
    out = named.stdout + named.stderr
    lines = _verdicts(out)
    assert "faster" in lines["test_model"] and "faster" in lines["test_untracked"], out[-4000:]
    assert "base: no such benchmark there: test_new.py not in the base's tree" in lines["test_new"], out[-4000:]


def test_a_measurement_comes_back_from_its_dict():
    """What a worker sends (Measurement.to_dict) is the controller's Measurement again: stages, the case's own
    metrics (translation quality), info, the baseline."""
    from pytest_s2st.measure.record import Metric
    from pytest_s2st.measurement import Measurement, StageResult

    m = Measurement("c", "S2UT", [StageResult("s2u", {"runtime_s": Metric(0.02, "timer", details={"rounds_s": [0.02]}),
                                                      "flops": Metric(None, "torch", "off")}),
                                  StageResult("vocoder", {"runtime_s": Metric(0.01, "timer")})],
                    info={"identity": "t.py::t", "samples": 4})
    m.quality = {"bleu": Metric(12.5, "sacrebleu")}
    m.baseline = Measurement("c baseline", "S2UT", [StageResult("s2u", {"runtime_s": Metric(0.03, "timer")})])
    back = Measurement.from_dict(m.to_dict())
    assert back.to_dict() == m.to_dict()
    assert back.metric("bleu").value == 12.5 and back.metric("flops", "s2u").reason == "off"
    assert back.baseline.metric("runtime_s").value == 0.03


def test_the_markdown_summary_holds_each_ab_row_and_its_verdict():
    from pytest_s2st.ab import markdown_ab

    row = {"metrics": {"runtime_s": {"value": 0.002}, "flops": {"value": 200.0}},
           "baseline": {"metrics": {"runtime_s": {"value": 0.001}, "flops": {"value": 100.0}}},
           "ab": {"ratio": 2.0, "low": 1.9, "high": 2.1, "word": "slower", "pairs": 40, "mode": "code versions",
                  "base": "origin/main"}}
    lines = markdown_ab([("test_a|b", row, "FAIL"), ("plain", {"metrics": {}}, "")])
    assert lines[0] == "### s2st: A/B of code versions (base origin/main -> head)"
    body = [line for line in lines if line.startswith("| test_a")]
    assert body == ["| test_a\\|b | 1.000 ms | 2.000 ms | x2.000 [1.900, 2.100] | slower | **FAIL** | +100.0% |"]
    assert markdown_ab([("plain", {"metrics": {}}, "")]) == []


class _Ticking:
    """A stage whose call advances a fake clock by ``cost`` ticks."""

    def __init__(self, clock, cost):
        self.name, self.clock, self.cost = "s", clock, cost

    def forward(self, x):
        self.clock[0] += self.cost


def test_paired_rounds_are_sized_on_the_slower_side_and_read_the_true_ratio():
    from pytest_s2st.ab.inprocess import PairedRounds

    clock = [0.0]
    timer = lambda: clock[0]  # noqa: E731
    cpu = resolve_device("cpu")
    cand = TimedRounds([_Ticking(clock, 0.002)], [[0, 1, 2, 3]], cpu, 1, timer=timer, policy=RoundPolicy(6))
    base = TimedRounds([_Ticking(clock, 0.001)], [[0, 1, 2, 3]], cpu, 1, timer=timer, policy=RoundPolicy(6))
    from pytest_s2st.measure.runqueue import RunqueueClock

    cand._queue = base._queue = RunqueueClock("/nonexistent")  # no run-queue readings: wall times, the fake clock's
    paired = PairedRounds(cand, base)
    assert paired.calibrate(0.1) == 52  # 0.1 s / 2 ms = 50 calls, up to whole passes over 4 samples
    paired.run_all()
    assert cand.round_totals == pytest.approx([0.002] * 6) and base.round_totals == pytest.approx([0.001] * 6)
    assert not paired.own() and paired.change().ratio == pytest.approx(2.0)


def test_own_round_times_take_each_rounds_wait_for_a_cpu_out():
    rounds = TimedRounds([_Stage([])], [[0, 1]], resolve_device("cpu"), 1)
    rounds.calls, rounds.round_totals, rounds.waits = 4, [0.010, 0.012], [0.008, 0.0]
    assert rounds.own_round_totals() == pytest.approx([0.008, 0.012])  # 4 calls: 2 ms of wait each
    rounds.waits = [0.008, None]
    assert rounds.own_round_totals() is None  # a round without a reading: wall times for all


def test_a_wait_longer_than_the_clocked_calls_is_taken_as_its_share_of_the_window():
    """At load ~13 a round's wait (read around the round) exceeded the time its stage clocks saw (the loop between
    calls and the bookkeeping are waited in too): own times were 0 and the A/B judged nothing (too few rounds).
    The wait is now its share of the round's window: 4 calls clocked at 10 ms a sample, a 60 ms window of which
    50 ms waiting -> 10 ms x (1 - 50/60) a sample, not 0."""
    rounds = TimedRounds([_Stage([])], [[0, 1]], resolve_device("cpu"), 1)
    rounds.calls, rounds.round_totals, rounds.waits, rounds.windows = 4, [0.010, 0.010], [0.05, 0.0], [0.06, 0.05]
    assert rounds.own_round_totals() == pytest.approx([0.010 / 6, 0.010])
    rounds.windows = []  # no window read (a round timed elsewhere): the wait / the calls, capped at the round
    assert rounds.own_round_totals() == pytest.approx([0.010, 0.010])  # nothing left: the wall time, never a 0


class _PreemptedReading:
    """A run-queue clock whose every reading is preempted: 10 ms pass on ``clock`` and the thread waits them."""

    def __init__(self, clock):
        self.clock, self.waited = clock, 0.0

    def read(self):
        self.clock[0] += 0.010
        self.waited += 0.010
        return self.waited

    def close(self):
        pass


def test_a_preemption_in_a_run_queue_reading_is_inside_the_rounds_window(monkeypatch):
    """At load 8, 7 of 60 code-version A/Bs had no ratio: one round each read a wait longer than its window (the
    clock started after the first reading and stopped before the second, and a preemption fell between), so its own
    time was 0 and the median refused every pair. The window now holds both readings: a round of 2 calls of 5 ms
    own work a call, each reading preempted for 10 ms (the wait between the readings: 10 ms, the window: 30 ms),
    reads 5 ms x (1 - 10/30) a sample, not 0."""
    import pytest_s2st.rounds as rounds_module

    clock = [0.0]
    monkeypatch.setattr(rounds_module.time, "perf_counter", lambda: clock[0])

    class Work:
        name = "work"

        def forward(self, x):
            clock[0] += 0.005

    rounds = TimedRounds([Work()], [[0, 1]], resolve_device("cpu"), 1, timer=lambda: clock[0])
    rounds._queue = _PreemptedReading(clock)
    rounds.calls = 2
    wall, own = rounds.next_round()
    assert wall == pytest.approx(0.005) and rounds.windows == [pytest.approx(0.030)]
    assert rounds.waits == [pytest.approx(0.010)] and own == pytest.approx(0.005 * (1 - 0.010 / 0.030))
