"""A real PostgreSQL server for a test: a fresh cluster in a temporary folder (Debian's postgresql, installed by
`make sysdeps`), listening on a Unix socket only, stopped at the end. As root (a container, CI's `make sysdeps`)
the server runs as the `postgres` user, as PostgreSQL refuses root."""
from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Iterator


def _bin(name: str) -> str:
    found = shutil.which(name) or next(iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None)
    if not found:
        raise RuntimeError(f"{name} not found: PostgreSQL is a system dependency of the suite (make sysdeps)")
    return found


def _run(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if done.returncode:
        raise RuntimeError(f"{argv[-1]}: exit {done.returncode}: {done.stdout}{done.stderr}")


@contextlib.contextmanager
def postgres() -> Iterator[str]:
    """Yields a postgresql:// URL to a fresh database. The cluster lives in its own folder under the system's
    temporary folder, not under pytest's tmp_path: pytest makes its root 0700 again at every session start (an
    xdist worker's too), which would lock the postgres user out mid-test."""
    folder = Path(tempfile.mkdtemp(prefix="s2st-pg-"))
    data, sockets = folder / "data", folder / "sock"
    sockets.mkdir()
    prefix: list[str] = []
    if os.geteuid() == 0:
        os.chmod(folder, 0o755)
        shutil.chown(folder, "postgres")
        shutil.chown(sockets, "postgres")
        prefix = ["runuser", "-u", "postgres", "--"]
    user = "postgres" if prefix else os.environ.get("USER") or "runner"
    _run(prefix + [_bin("initdb"), "-D", str(data), "-U", user, "--auth=trust", "-E", "UTF8"])
    port = "5433"
    options = f"-c listen_addresses='' -c unix_socket_directories={sockets} -c port={port} -c fsync=off"
    _run(prefix + [_bin("pg_ctl"), "-D", str(data), "-o", options, "-w", "-t", "60", "-l", str(folder / "log"),
                   "start"])
    try:
        yield f"postgresql://{user}@/postgres?host={sockets}&port={port}"
    finally:
        subprocess.run(prefix + [_bin("pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"],
                       capture_output=True)
        shutil.rmtree(folder, ignore_errors=True)
