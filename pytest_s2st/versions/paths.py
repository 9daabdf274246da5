"""Where the base side reads each path the user named, so that it never runs the head's code.

A path inside the head's repository (relative or absolute) is the base's own file at the same place in its
worktree. Where the base's tree lacks it:
- a file git tracks in the head: the base has no such file; dropped from the base's command line (its benchmarks
  are "base: no such benchmark there", named) unless it is the only path, which the base's pytest then names;
- an untracked Python file (a test written in the job, not committed): copied into the base's worktree, so what it
  imports comes from the base's tree, not from the head's folder pytest would put first on sys.path;
- any other untracked path (a staged model, a config written by the job): the head's, read by both sides.
A path outside the repository is the same for both sides.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from .worktree import GIT_TIMEOUT_S, Worktree

MAX_PATH = 4096


def _tracked(repository: Path, path: Path) -> bool:
    """Whether git tracks ``path`` (a file, or any file under a folder) in the head's index."""
    try:
        done = subprocess.run(["git", "ls-files", "-z", "--", str(path)], cwd=repository, capture_output=True,
                              timeout=GIT_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return True  # unknown: taken as code, so the base never reads the head's copy of it
    return done.returncode != 0 or bool(done.stdout)


class BasePaths:
    def __init__(self, tree: Worktree, head_cwd: Path):
        self.tree, self.head_cwd = tree, Path(head_cwd).absolute()
        self.absent: list[str] = []   # named paths the base's tree does not have (as the user wrote them)
        self.copied: list[str] = []   # untracked Python files copied into the base's worktree
        self.shared: list[str] = []   # untracked paths both sides read from the head's tree
        self._placed = 0              # positional paths the base got

    def args(self, args: list[str]) -> list[str]:
        """``args`` (the head's command line, controller options already dropped) for the base."""
        out: list[str] = []
        dropped: list[str] = []
        for arg in args:
            placed = self.arg(arg)
            if placed is None:
                dropped.append(arg)
            else:
                out.append(placed)
        if dropped and not self._placed:  # none left: the base would collect its whole tree instead
            out.append(str(self.tree.mapped(self.head_cwd / dropped[0].split("::", 1)[0])))  # its pytest names it
        return out

    def arg(self, arg: str) -> str | None:
        """One argument for the base; None: a path the base does not have (dropped, remembered in ``absent``)."""
        prefix, sep, value = arg.partition("=") if arg.startswith("--") else ("", "", arg)
        if arg.startswith("-") and not sep:
            return arg
        text, colons, rest = value.partition("::")
        if not text or len(text) > MAX_PATH or "\x00" in text:
            return arg
        given = Path(text)
        head = given if given.is_absolute() else self.head_cwd / given
        try:
            if not head.exists():
                return arg  # not a path (a -k expression, a marker), or one neither side has
            inside = head.resolve().is_relative_to(self.tree.repository)
        except (OSError, ValueError):
            return arg
        if not inside:
            return arg
        base = self.tree.mapped(head)
        if not base.exists():
            if _tracked(self.tree.repository, head):
                if sep:  # an option's file (--s2st-config=...): the base's pytest names it
                    return f"{prefix}={base}{colons}{rest}"
                self.absent.append(text)
                return None
            if head.is_file() and head.suffix == ".py":
                base.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(head, base)
                self.copied.append(text)
            else:
                self.shared.append(text)
                base = head
        placed = str(base) if given.is_absolute() or base == head else text
        self._placed += not sep
        return f"{prefix}={placed}{colons}{rest}" if sep else f"{placed}{colons}{rest}"
