"""s2st-bisect GOOD BAD -- pytest ARGS...: the first commit between two revisions whose benchmarks are past a limit
against GOOD (as ``asv find``), with the code-version A/B as the oracle.

Each step checks one commit out in a temporary worktree and runs, there, the pytest command given after ``--``
with ``--s2st-ab-base GOOD --s2st-compare-fail LIMITS``: the commit is bad when a benchmark's A/B crosses a limit
(its verdict FAIL), good when every A/B ran and none did. A step that cannot decide (INCONCLUSIVE, no A/B, pytest
could not run) is skipped, as ``git bisect skip``: its neighbour is tried. The number of pytest runs is bounded
(``--max-runs``, default: what a binary search needs plus two skips). Each step's verdict is printed.
"""
from __future__ import annotations

import math
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import S2STError
from ..inputs import load_json, read_text, show
from ..limits import compare_limits
from ..versions.worktree import Worktree, repository_root, resolve_revision
from ..versions.worktree import _git as git
from .args import OneLineParser, int_in, refuse

GOOD, BAD, SKIP = "good", "bad", "skip"
RUN_TIMEOUT_S = 3600.0  # one step's pytest session


@dataclass
class Step:
    sha: str
    verdict: str
    detail: str


def _git(root: Path, *args: str) -> str:
    return git(root, *args)


def commits_between(root: Path, good: str, bad: str) -> list[str]:
    """The commits after GOOD up to BAD on the path between them, oldest first (BAD last)."""
    good_sha, bad_sha = resolve_revision(root, good), resolve_revision(root, bad)
    try:
        _git(root, "merge-base", "--is-ancestor", good_sha, bad_sha)
    except S2STError:
        raise S2STError(f"{good} is not an ancestor of {bad}: nothing to bisect between them") from None
    listed = _git(root, "rev-list", "--reverse", "--ancestry-path", f"{good_sha}..{bad_sha}")
    return [line for line in listed.splitlines() if line]


def judge_summary(path: Path) -> tuple[str, str]:
    """A step's verdict from its --s2st-summary FILE.json rows."""
    if not path.is_file():
        return SKIP, "no A/B ran (no summary written)"
    rows = load_json(path, "A/B summary")
    if not isinstance(rows, list) or not rows:
        return SKIP, "no A/B row"
    words = []
    verdicts = set()
    for row in rows:
        ab = row.get("s2st", {}).get("ab", {}) if isinstance(row, dict) else {}
        verdict = row.get("verdict") if isinstance(row, dict) else None
        verdicts.add(verdict)
        ratio = ab.get("ratio") if isinstance(ab, dict) else None
        words.append(f"{row.get('name', '?')} x{ratio:.3f} {ab.get('word', '')}" if isinstance(ratio, (int, float))
                     else f"{row.get('name', '?')} no ratio")
    detail = "; ".join(words)
    if "FAIL" in verdicts:
        return BAD, detail
    if verdicts <= {"PASS"}:
        return GOOD, detail
    return SKIP, detail + f" ({', '.join(sorted(str(v) for v in verdicts - {'PASS'}))})"


def run_step(root: Path, sha: str, good: str, limits: str, pytest_args: list[str], log_dir: Path) -> Step:
    tree = Worktree(root, sha)
    summary = log_dir / f"{sha[:12]}-summary.json"
    try:
        cwd = tree.mapped(Path.cwd())
        command = [sys.executable, "-m", "pytest", *pytest_args, "--s2st-ab-base", good, "--s2st-compare-fail",
                   limits, "--s2st-summary", str(summary), "-p", "no:cacheprovider"]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tree.path),
                                                                         os.environ.get("PYTHONPATH")]))}
        with open(log_dir / f"{sha[:12]}.log", "w") as log:
            try:
                done = subprocess.run(command, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, timeout=RUN_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                return Step(sha, SKIP, f"pytest ran past {RUN_TIMEOUT_S:g} s")
        if not summary.is_file():  # pytest stopped before any A/B: its exit code and its own last words say why
            return Step(sha, SKIP, f"no A/B ran: pytest exit {done.returncode} "
                                   f"({EXIT_WORDS.get(done.returncode, 'unknown')}): "
                                   f"{_last_words(log_dir / f'{sha[:12]}.log')}")
        verdict, detail = judge_summary(summary)
        return Step(sha, verdict, detail)
    finally:
        tree.close()


EXIT_WORDS = {0: "passed", 1: "tests failed", 2: "interrupted", 3: "internal error", 4: "usage error",
              5: "no tests collected"}


def _last_words(log: Path) -> str:
    """The line of a pytest log that says why it stopped: its last ERROR line, else its last line."""
    try:
        lines = [line.strip() for line in read_text(log, "pytest log").splitlines() if line.strip()]
    except S2STError:
        return "(no log)"
    errors = [line for line in lines if line.startswith(("ERROR", "E "))]
    return show((errors or lines or ["(empty log)"])[-1], 300)


def bisect(commits: list[str], oracle, max_runs: int, say=print) -> tuple[str | None, list[Step]]:
    """Binary search for the first bad commit; BAD (the last) is bad by the user's word and not re-run."""
    lo, hi = 0, len(commits) - 1  # the first bad lies in commits[lo..hi]; commits[hi] is known bad
    steps: list[Step] = []
    skipped: set[int] = set()
    while lo < hi and len(steps) < max_runs:
        mid = (lo + hi) // 2
        candidates = [i for i in sorted(range(lo, hi), key=lambda i: (abs(i - mid), i)) if i not in skipped]
        if not candidates:
            break
        mid = candidates[0]
        step = oracle(commits[mid])
        steps.append(step)
        say(f"step {len(steps)}: {step.sha[:12]} ({mid + 1} of {len(commits)}): {step.verdict}: {step.detail}")
        if step.verdict == BAD:
            hi = mid
        elif step.verdict == GOOD:
            lo = mid + 1
        else:
            skipped.add(mid)
    if lo == hi:
        return commits[lo], steps
    return None, steps


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" not in argv:
        return refuse("s2st-bisect", "usage: s2st-bisect GOOD BAD [--limits L] [--max-runs N] -- PYTEST ARGS...")
    split = argv.index("--")
    parser = OneLineParser(prog="s2st-bisect", description="The first commit between GOOD and BAD whose benchmarks "
                                                           "are past a limit against GOOD (code-version A/B).")
    parser.add_argument("good", help="a revision whose benchmarks are good (the A/B base of every step)")
    parser.add_argument("bad", help="a later revision past the limit")
    parser.add_argument("--limits", default="runtime_s:5%",
                        help="--s2st-compare-fail limits that make a commit bad (default runtime_s:5%%)")
    parser.add_argument("--max-runs", type=int_in(1, 1000), default=None,
                        help="pytest runs at most (default: a binary search's steps plus two skips)")
    parser.add_argument("--logs", type=Path, default=None, help="keep each step's pytest output and summary here")
    args = parser.parse_args(argv[:split])
    pytest_args = argv[split + 1:]
    if not pytest_args or pytest_args[0] not in ("pytest", "py.test"):
        return refuse("s2st-bisect", "after --: the pytest command line, e.g. -- pytest benchmarks/")
    try:
        compare_limits(args.limits)
    except ValueError as exc:
        return refuse("s2st-bisect", f"--limits {show(args.limits)}: {exc}")
    try:
        root = repository_root(Path.cwd())
        commits = commits_between(root, args.good, args.bad)
        if not commits:
            raise S2STError(f"{args.good}..{args.bad}: no commit between them")
        max_runs = args.max_runs or math.ceil(math.log2(max(2, len(commits)))) + 2
        print(f"s2st-bisect: {len(commits)} commit(s) after {args.good} up to {args.bad}; at most {max_runs} "
              f"pytest run(s), each an A/B against {args.good} with limits {args.limits}")
        log_dir = args.logs or Path(tempfile.mkdtemp(prefix="s2st-bisect-"))
        log_dir.mkdir(parents=True, exist_ok=True)
        first, steps = bisect(commits, lambda sha: run_step(root, sha, args.good, args.limits, pytest_args[1:],
                                                             log_dir), max_runs)
    except S2STError as exc:
        return refuse("s2st-bisect", exc)
    if first is None:
        skipped = [step.detail for step in steps if step.verdict == SKIP]
        reasons = list(dict.fromkeys(skipped))
        why = (f"{len(skipped)} step(s) undecided: {reasons[0]}"
               + (f" (and {len(reasons) - 1} other reason(s): see above)" if len(reasons) > 1 else "")
               if skipped else f"--max-runs {max_runs} reached")
        print(f"s2st-bisect: undecided after {len(steps)} run(s): {why}; logs in {log_dir}")
        return 3
    subject = _git(root, "log", "-1", "--format=%s", first)
    print(f"s2st-bisect: first bad commit: {first} {show(subject, 200)} ({len(steps)} run(s); logs in {log_dir})")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
