"""The embedded default: what `pytest benchmarks/` runs when no --s2st-config is given.

The callable demo always; the tiny real fairseq models of every kind when fairseq is installed
(built offline on first use, then cached).
"""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path


def cache_dir() -> Path:
    return Path(os.environ.get("S2ST_CACHE_DIR") or Path.home() / ".cache" / "pytest-s2st")


def default_config_paths() -> list[Path]:
    from .demo import stage_demo

    paths = [stage_demo(cache_dir() / "demo")]
    if importlib.util.find_spec("fairseq") is not None:
        from .stage import default_configs

        paths += default_configs()
    return paths
