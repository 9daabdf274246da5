"""Quality gate: frozen policy, offline scorers, PASS / FAIL / INCONCLUSIVE verdict.

Importing this package loads no model and no heavy library: ``scorers`` (pocketsphinx,
Resemblyzer, torch) is imported only by whoever scores.
"""
from .policy import Policy
from .scorefile import Score, Scores, load_scores, pcm_sha256
from .verdict import EXIT_CODES, FAIL, INCONCLUSIVE, PASS, Verdict, assess

__all__ = ["Policy", "Score", "Scores", "load_scores", "pcm_sha256", "Verdict", "assess",
           "PASS", "FAIL", "INCONCLUSIVE", "EXIT_CODES"]
