"""Quality gate: frozen policy, offline scorers, PASS / FAIL / INCONCLUSIVE verdict.

Importing this package loads no model and no heavy library, and no submodule until a name is asked for
(PEP 562): the plugin reads the table of scored metrics (``scored``) at import without pulling in the
verdict and run-dir readers. ``scorers`` (pocketsphinx, Resemblyzer, torch) is imported only by whoever scores.
"""
from __future__ import annotations

import importlib
from typing import Any

_WHERE = {"Policy": "policy", "Score": "scorefile", "Scores": "scorefile", "load_scores": "scorefile",
          "pcm_sha256": "scorefile", "Verdict": "verdict", "assess": "verdict", "PASS": "verdict", "FAIL": "verdict",
          "INCONCLUSIVE": "verdict", "EXIT_CODES": "verdict"}

__all__ = list(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
