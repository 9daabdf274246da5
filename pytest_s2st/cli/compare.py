"""s2st-compare OLD.json NEW.json [--fail LIMITS]: compare two saved runs, as --benchmark-compare compares a live run.

Each side is a pytest-benchmark JSON (``--benchmark-json``, ``--benchmark-autosave``), one run or several folded
by ``s2st-merge --repeats`` or saved by ``--s2st-processes N``: the runtime cell then carries the between-run
verdict (3 runs or more per side), as in a live compare. ``--fail`` takes ``--s2st-compare-fail``'s limits; a
limit crossed, or a benchmark of NEW with no counterpart in OLD, exits 1. It is how two code versions timed in
one CI job (interleaved processes of each, docs/ci.md) are judged.
"""
from __future__ import annotations

import argparse
import sys

from ..errors import S2STError
from .args import OneLineParser, path_arg, refuse


def _limits(value: str):
    from ..settings import compare_limits

    try:
        return compare_limits(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(
        prog="s2st-compare",
        description="Compare two saved runs (pytest-benchmark JSON) as --benchmark-compare does: each s2st "
                    "metric then -> now, the runtime with its between-run verdict; --fail exits 1 past a limit.")
    parser.add_argument("old", type=path_arg, help="the saved run compared with (the baseline side)")
    parser.add_argument("new", type=path_arg, help="the saved run judged (the candidate side)")
    parser.add_argument("--fail", type=_limits, default=(), metavar="LIMITS",
                        help="as --s2st-compare-fail, e.g. runtime_s:5%%,flops:1%%,tensor_peak_mib:1%%")
    args = parser.parse_args(argv)
    from ..distribute import load_saved_run
    from ..report import (compared_rows, insignificant, regressions, render_compare, rows_from, statistic_names,
                          unmatched)

    try:
        old, new = load_saved_run(args.old), load_saved_run(args.new)
    except S2STError as exc:
        return refuse("s2st-compare", exc)
    compared: dict = {}
    for bench in old["benchmarks"]:
        compared.update(compared_rows(bench))
    rows = []
    for bench in new["benchmarks"]:
        s2st = (bench.get("extra_info") or {}).get("s2st") if isinstance(bench.get("extra_info"), dict) else None
        if isinstance(s2st, dict) and s2st:
            rows += rows_from(str(bench.get("name") or bench["fullname"]), bench["fullname"], s2st)
    if not rows:
        return refuse("s2st-compare", f"{args.new}: no s2st benchmark in it (no extra_info.s2st)")
    for line in render_compare(rows, compared):
        print(line)
    means = statistic_names(rows, "s")
    print(f"runtime: new/old ratio of per-run {means}; 3 runs or more per side: a Welch 95% interval on log run "
          f"{means} (slower/faster when it excludes 1); one run per side: a word only for a gross change")
    for name in unmatched(rows, compared):
        print(f"s2st-compare: {name}: no counterpart in {args.old}")
    for note in insignificant(rows, compared, args.fail):
        print(f"note: {note}")
    failed = regressions(rows, compared, args.fail) if args.fail else []
    for line in failed:
        print(f"regressed: {line}")
    if args.fail:
        print(f"s2st-compare: {len(failed)} regression(s) past {','.join(map(str, args.fail))}")
    return 1 if failed else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
