"""s2st-compare OLD.json NEW.json [--fail LIMITS]: compare two saved runs, as --benchmark-compare compares a live run.

Each side is a pytest-benchmark JSON (``--benchmark-json``, ``--benchmark-autosave``), one run or several folded
by ``s2st-merge --repeats`` or saved by ``--s2st-processes N``: the runtime cell then carries the between-run
verdict (3 runs or more per side), as in a live compare. ``--fail`` takes ``--s2st-compare-fail``'s limits. It is
how two code versions timed in one CI job (interleaved processes of each, docs/ci.md) are judged.

Exit status (docs/options.md keeps this table; a test reads it there):
0  compared; under --fail every limit was checked and none crossed
1  under --fail: a limit crossed, or one not checked (a benchmark of NEW with no counterpart in OLD, a metric a
   side did not measure)
2  refused input: a file that is no saved run, a bad --fail
3  no verdict: the runs did not measure the same work (another machine kind, or a benchmark whose counterpart
   measured other work: config, model files, samples, inputs, protocol, device, threads); one line says what
   differs. A crossed limit elsewhere still exits 1.
"""
from __future__ import annotations

import argparse
import sys

EXIT_OK, EXIT_FAIL, EXIT_REFUSED, EXIT_NO_VERDICT = 0, 1, 2, 3

from ..distribute import load_saved_run
from ..errors import S2STError
from ..judging import insignificant, judge_limits, unlike_rows, unmatched
from ..report import render_compare, statistic_names
from ..rows import compared_rows, rows_from
from ..settings import compare_limits
from ..work import machine_differences
from .args import OneLineParser, path_arg, refuse


def _limits(value: str):
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

    try:
        old, new = load_saved_run(args.old), load_saved_run(args.new)
    except S2STError as exc:
        return refuse("s2st-compare", exc)
    kinds, noted = machine_differences(old["machine_info"], new["machine_info"])
    if kinds:  # nothing measured on one machine kind says anything about another's
        print(f"s2st-compare: no verdict: {args.old} and {args.new} ran on different machine kinds "
              f"({'; '.join(kinds)})")
        return EXIT_NO_VERDICT
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
    for line in noted:
        print(f"note: {line} (timings of two Python versions may differ)")
    other = unlike_rows(rows, compared)
    for line in other if not args.fail else ():  # under --fail, its "not checked" line says it
        print(f"s2st-compare: {line}")
    for name in unmatched(rows, compared):
        print(f"s2st-compare: {name}: no counterpart in {args.old}")
    for note in insignificant(rows, compared, args.fail):
        print(f"note: {note}")
    crossed, unchecked = judge_limits(rows, compared, args.fail) if args.fail else ([], [])
    for line in crossed:
        print(f"regressed: {line}")
    for line in unchecked:
        print(f"not checked: {line}")
    if args.fail:
        print(f"s2st-compare: {len(crossed)} regression(s), {len(unchecked)} not checked, limits "
              f"{','.join(map(str, args.fail))}")
    if crossed:
        return EXIT_FAIL
    if other:
        return EXIT_NO_VERDICT
    return EXIT_FAIL if unchecked else EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
