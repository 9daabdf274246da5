"""A git revision checked out beside the working tree (``git worktree add --detach``), removed on close.

The base of a code-version A/B lives in a fresh temporary folder outside the repository (no path of the head
is touched, wherever the run starts from); ``close`` removes the worktree and git's record of it, and runs at
most once, also from ``atexit`` when the session dies half-way.
"""
from __future__ import annotations

import atexit
import shutil
import subprocess
import tempfile
from pathlib import Path

from ..errors import S2STError

GIT_TIMEOUT_S = 300.0  # one git command (a checkout of a large tree included)
MAX_GIT_OUTPUT = 4096  # characters of git's own message kept in an error line


def _git(cwd: Path, *args: str) -> str:
    try:
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=GIT_TIMEOUT_S,
                              stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise S2STError("git is not installed: --s2st-ab-base checks the base revision out with git worktree") from None
    except subprocess.TimeoutExpired:
        raise S2STError(f"git {' '.join(args)} took longer than {GIT_TIMEOUT_S:g} s in {cwd}") from None
    if done.returncode != 0:
        said = " ".join((done.stderr or done.stdout).split())[:MAX_GIT_OUTPUT]
        raise S2STError(f"git {' '.join(args)} in {cwd} failed: {said}")
    return done.stdout.strip()


def repository_root(start: Path) -> Path:
    """The top of the git working tree that holds ``start`` (S2STError when there is none)."""
    try:
        return Path(_git(start, "rev-parse", "--show-toplevel")).resolve()
    except S2STError as exc:
        raise S2STError(f"--s2st-ab-base: {start} is not inside a git repository ({exc})") from None


def resolve_revision(root: Path, ref: str) -> str:
    """The commit ``ref`` names (a branch, tag, origin/main, HEAD~1, a sha), as a full sha."""
    if ref.startswith("-"):  # never an option to git
        raise S2STError(f"--s2st-ab-base {ref!r}: a revision, not an option")
    try:
        return _git(root, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}")
    except S2STError:
        raise S2STError(f"--s2st-ab-base {ref!r}: no such commit in {root} (fetch it first, e.g. "
                        "git fetch origin main, and check out with fetch-depth: 0 in CI)") from None


class Worktree:
    """``ref`` of the repository holding ``start``, checked out in a temporary folder."""

    def __init__(self, start: Path, ref: str):
        self.repository = repository_root(start)
        self.ref = ref
        self.sha = resolve_revision(self.repository, ref)
        self.head_sha = resolve_revision(self.repository, "HEAD")
        self.parent = Path(tempfile.mkdtemp(prefix="s2st-ab-base-"))
        self.path = self.parent / self.repository.name
        self._closed = False
        atexit.register(self.close)
        try:
            _git(self.repository, "worktree", "add", "--detach", "--force", str(self.path), self.sha)
        except BaseException:
            self.close()
            raise

    def mapped(self, head_path: Path) -> Path:
        """The base's counterpart of a path inside the head's working tree (itself when it lies outside)."""
        try:
            return self.path / Path(head_path).resolve().relative_to(self.repository)
        except ValueError:
            return Path(head_path)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if self.path.exists():
                _git(self.repository, "worktree", "remove", "--force", str(self.path))
        except S2STError:
            pass  # removed below; prune forgets it
        shutil.rmtree(self.parent, ignore_errors=True)
        try:
            _git(self.repository, "worktree", "prune")
        except S2STError:
            pass
