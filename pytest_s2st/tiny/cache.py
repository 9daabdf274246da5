"""Where staged models live and how they get there once: versioned keys, a file lock, an atomic rename."""
from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
from importlib import metadata
from pathlib import Path
from typing import Callable

from ..errors import S2STError
from ..progress import phase


def cache_root() -> Path:
    """$S2ST_CACHE_DIR, else ~/.cache/pytest-s2st. S2STError, in one line naming the variable, when it holds
    a control character (a line break pasted with it) or names something that is not a folder."""
    base = os.environ.get("S2ST_CACHE_DIR")
    if not base:
        return Path.home() / ".cache" / "pytest-s2st"
    if any(ord(c) < 32 or ord(c) == 127 for c in base):
        raise S2STError(f"$S2ST_CACHE_DIR {base[:200]!r}: holds a control character (a line break?); "
                        "set it to a folder's path")
    path = Path(base)
    # the nearest part that exists must be a folder: under a regular file nothing can be created
    existing = next((p for p in (path, *path.parents) if os.path.lexists(p)), None)
    if existing is not None and not existing.is_dir():
        where = "" if existing == path else f" ({existing} is not a folder)"
        raise S2STError(f"$S2ST_CACHE_DIR {base[:200]}: is not a folder{where}; set it to a folder "
                        "(or unset it for ~/.cache/pytest-s2st)")
    return path


def dist_version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "none"


def source_key(path: str | os.PathLike) -> str:
    """A short hash of a builder's source: editing the builder invalidates what it built."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:10]


def build_once(target: Path, done_marker: str, build: Callable[[Path], object], what: str) -> Path:
    """Build into target unless target/done_marker exists. Concurrent callers (pytest-xdist workers)
    wait on a file lock; the build goes to a temporary sibling renamed into place only when complete."""
    if (target / done_marker).is_file():
        return target
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target.parent / f".{target.name}.lock", "w") as lock:
            with phase(f"waiting for another process building {what}"):
                fcntl.flock(lock, fcntl.LOCK_EX)
            if not (target / done_marker).is_file():
                tmp = target.parent / f".{target.name}.tmp-{os.getpid()}"
                shutil.rmtree(tmp, ignore_errors=True)
                try:
                    # the first build takes seconds to minutes (training tiny models): a line every 10 s
                    with phase(f"building {what} (first use only: cached after)"):
                        build(tmp)
                except BaseException:
                    shutil.rmtree(tmp, ignore_errors=True)
                    raise
                if target.exists():  # a stale, incomplete directory from a killed run
                    shutil.rmtree(target)
                os.rename(tmp, target)
    except OSError as exc:
        raise S2STError(f"{target}: cannot stage {what} there: {exc.strerror or exc} "
                        "(set S2ST_CACHE_DIR to a writable folder)") from None
    return target
