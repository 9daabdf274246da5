"""python -m pytest_s2st.tiny.folder fairseq-full|qwen3tts-full: build that set into the cache once and print
its folder, alone on stdout, so that a script can take it with $(...) and stop when the build fails.

A module of its own: the builders' cache keys hash their source files, so an entry point there would change
the key and rebuild gigabytes.
"""
from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Callable


def _fairseq_full() -> Path:
    from .fairseq_full import default_full_configs, default_full_dir

    default_full_configs()
    return default_full_dir()


def _qwen3tts_full() -> Path:
    from .qwen_full import full_qwen3tts_dir

    return full_qwen3tts_dir()


BUILDS: dict[str, Callable[[], Path]] = {"fairseq-full": _fairseq_full, "qwen3tts-full": _qwen3tts_full}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] not in BUILDS:
        print(f"usage: python -m pytest_s2st.tiny.folder {'|'.join(BUILDS)}", file=sys.stderr)
        return 2
    from ..errors import S2STError

    try:
        with contextlib.redirect_stdout(sys.stderr):  # qwen-tts prints a banner on import; stdout is the folder
            folder = BUILDS[args[0]]()
    except S2STError as exc:
        print(f"pytest_s2st.tiny.folder: error: {exc}", file=sys.stderr)
        return 1
    print(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
