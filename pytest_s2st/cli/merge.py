"""s2st-merge A.json B.json ... -o MERGED.json: join the runs that shards saved into one.

Each input is a pytest-benchmark JSON (``--benchmark-json`` or ``--benchmark-save``/``-autosave``)
of one ``--s2st-shard i/n`` job. The output is again one pytest-benchmark run, so
``pytest-benchmark compare`` reads it, and, placed in the storage folder
(``.benchmarks/<machine id>/NNNN_name.json``), ``pytest --benchmark-compare`` and
``--s2st-compare-fail`` compare with it.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

from ..distribute import merge_saved_runs
from ..errors import S2STError
from ..inputs import dumps
from ..runtime_stats import RUNTIME_STATISTIC
from .args import OneLineParser, path_arg, refuse


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(
        prog="s2st-merge",
        description="Join the pytest-benchmark JSONs saved by --s2st-shard jobs into one run. Refuses "
                    "runs of another machine kind, Python, commit or pytest-benchmark version, and a "
                    "benchmark present in two files.")
    parser.add_argument("runs", nargs="+", type=path_arg, help="saved runs (pytest-benchmark JSON), two or more")
    parser.add_argument("-o", "--output", type=path_arg, required=True, help="merged JSON to write (parents created)")
    parser.add_argument("--repeats", action="store_true",
                        help="the runs are repeat processes of the same benchmarks (not shards): each benchmark's "
                             f"runtime becomes the {RUNTIME_STATISTIC} of its runs, each run's {RUNTIME_STATISTIC} "
                             "kept, so that compare can tell "
                             "a change from the drift between runs (3 or more runs per side)")
    args = parser.parse_args(argv)

    try:
        merged = merge_saved_runs(args.runs, repeats=args.repeats)
        if args.output.exists() and args.output.is_dir():
            raise S2STError(f"-o {args.output}: is a directory")
        if any(args.output.resolve() == p.resolve() for p in args.runs):
            raise S2STError(f"-o {args.output}: is one of the inputs")
        args.output.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".s2st-merge-", dir=args.output.parent)

        with os.fdopen(fd, "w") as fh:
            fh.write(dumps(merged, indent=4))  # never NaN: it is not JSON
        os.replace(tmp, args.output)
    except S2STError as exc:
        return refuse("s2st-merge", exc)
    except OSError as exc:
        return refuse("s2st-merge", f"-o {args.output}: {exc.strerror or exc}")
    print(f"s2st-merge: {len(merged['benchmarks'])} benchmark(s) from {len(args.runs)} run(s) -> {args.output}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
