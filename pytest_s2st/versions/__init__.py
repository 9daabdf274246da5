"""The code-version A/B (``--s2st-ab-base REF``): the benchmarks of a git revision (a pull request's base) timed
against this checkout's, round by round, in warm worker processes that each import their own tree (pytest-free).

- ``worktree``: the base checked out beside the head (``git worktree``), removed again whatever happens;
- ``channel``: the controller's listener and a worker's connection (length-framed JSON, an auth key);
- ``worker``: what a worker does at a benchmark's timing pass: waits, then runs the rounds it is told to;
- ``driver``: the controller: starts the worker pairs, holds every worker but one still while that one times,
  alternates the sides round by round, and folds both sides into one measurement with the paired verdict.
"""
