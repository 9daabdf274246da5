"""s2st-history: keep every run in a results database and see it over time.

    s2st-history import RUN.json|DIR ...    add saved runs (pytest-benchmark JSON, ours or plain; a folder: every
                                            *.json under it, as .benchmarks/ holds them)
    s2st-history site OUT                   write the static trend site
    s2st-history check                      every series judged at its newest run: exit 1 when a change point in
                                            the metric's bad direction within the last --window runs is still in
                                            force, or the newest value is past the window threshold; exit 2 when
                                            there is nothing to judge (no database, no run, no match)
    s2st-history links SITE_URL [NODEID...]  markdown links to the trend page of each test id (read from standard
                                            input when none is given, e.g. from pytest --collect-only -q): a pull
                                            request's job summary links to the history of every benchmark it ran

``--db`` (or $S2ST_HISTORY) names the database: a path (default .benchmarks/s2st-history.sqlite),
sqlite:///PATH or postgresql://USER@HOST/DB.
"""
from __future__ import annotations

import argparse
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, Iterator

from ..errors import S2STError
from ..history.judge import absolute_key, judge
from ..history.records import load_document
from ..history.site import ALL, benchmark_page, write_site
from ..history.store import open_store
from ..inputs import show
from .args import OneLineParser, int_in, path_arg, refuse

MAX_FILES = 100_000  # files one import walks (a folder that is a whole disk is refused, not walked forever)
PARALLEL_FROM = 16  # files from which an import reads them in worker processes (starting them costs ~0.1 s)
MAX_READERS = 4


def _fraction(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        number = float("nan")
    if not 0 < number < 1:
        raise argparse.ArgumentTypeError(f"'{show(value, 40)}': expected a number between 0 and 1")
    return number


def _files(paths: list[Path]) -> list[Path]:
    out: list[Path] = []
    for path in paths:
        if path.is_dir():
            found = sorted(p for p in path.rglob("*.json") if p.is_file() and not p.is_symlink())
            out += found
        elif path.exists():
            out.append(path)
        else:
            raise S2STError(f"{show(str(path))}: no such file or folder")
        if len(out) > MAX_FILES:
            raise S2STError(f"{show(str(path))}: more than {MAX_FILES} files to import")
    return out


def _documents(files: list[Path]) -> Iterator[Any]:
    """The saved runs read in order; with many files, read by worker processes beside the writer (reading JSON was
    two thirds of a large import's time on one CPU). A file that cannot be read raises at its place in the order."""
    workers = min(os.cpu_count() or 1, MAX_READERS)
    if workers < 2 or len(files) < PARALLEL_FROM:
        yield from map(load_document, files)
        return

    with ProcessPoolExecutor(workers) as pool:
        yield from pool.map(load_document, files)  # one file a task: a bad file fails alone


def _import(args: argparse.Namespace) -> int:
    files = _files(args.runs)
    with open_store(args.db) as store:
        added, kept = store.append_all(_documents(files))
        total = store.run_count()
    print(f"s2st-history: {added} run(s) added, {kept} already kept; {total} run(s) in {show(str(args.db))}")
    return 0


def _site(args: argparse.Namespace) -> int:
    with open_store(args.db, create=False) as store:
        pages = write_site(store, args.out, args.commit_url)
    print(f"s2st-history: {len(pages)} page(s) -> {args.out / 'index.html'}")
    return 0


def _check(args: argparse.Namespace) -> int:
    bad = judged_count = 0
    with open_store(args.db, create=False) as store:
        if store.run_count() == 0:
            raise S2STError(f"{show(str(args.db))}: the history holds no run: nothing to judge")
        keys = [k for k in store.keys(args.branch, args.machine)
                if args.benchmark is None or args.benchmark in k.benchmark]
        if not keys:
            asked = ", ".join(f"--{name} {show(value)}" for name, value in
                              (("branch", args.branch), ("machine", args.machine), ("benchmark", args.benchmark))
                              if value is not None)
            raise S2STError(f"{show(str(args.db))}: no run matches {asked}: nothing to judge")
        for key in keys:
            anchor = absolute_key(key)
            judged = judge(key, store.series(key, args.branch, args.machine), args.test, args.boundary, args.window,
                           store.series(anchor, args.branch, args.machine) if anchor else None)
            if not judged.values:
                continue
            judged_count += 1
            newest = len(judged.values) - 1
            for change in judged.changes:
                word = "worse" if change.worse else "better"
                how = "exact" if change.p_value == 0 else f"p={change.p_value:.2g}"
                where = f"runs {change.index + 1}-{change.last + 1}" if change.last not in (None, change.index) \
                    else f"run {change.index + 1}"
                print(f"{key.label()}: change point at {where} of {newest + 1}: {word} x{change.ratio:.3f} ({how})")
            failed = False
            in_force = judged.in_force(args.window)
            if in_force is not None:
                failed = True
                print(f"{key.label()}: FAIL: worse x{in_force.ratio:.3f} since run {in_force.index + 1} of "
                      f"{newest + 1}, still in force at the newest run")
            alert = next((a for a in judged.alerts if a.index == newest), None)
            if alert is not None:
                failed = True
                print(f"{key.label()}: FAIL: the newest value {alert.value:.6g} is past the {args.test} threshold "
                      f"{alert.limit:.6g} over the last {alert.window} runs (mean {alert.baseline:.6g})")
            bad += failed
    if not judged_count:
        raise S2STError(f"{show(str(args.db))}: no series holds a measured value: nothing to judge")
    print(f"s2st-history: {bad} of {judged_count} series worse at the newest run (a change point in the bad direction "
          f"within the last {args.window} runs, or the newest value past the window threshold)")
    return 1 if bad else 0


def _links(args: argparse.Namespace) -> int:
    scheme = args.site_url.split("://", 1)[0].lower() if "://" in args.site_url else ""
    if scheme not in ("http", "https"):
        raise S2STError(f"{show(args.site_url)}: the site URL must start with http:// or https://")
    ids = args.nodeids or [line.strip() for line in sys.stdin.read(1 << 20).splitlines()]
    ids = [i for i in ids if "::" in i]  # pytest --collect-only -q also prints a count line
    base = args.site_url.rstrip("/")
    if ids:
        print("| benchmark | trend |\n|---|---|")
    for nodeid in ids:
        cell = nodeid.replace("|", "\\|")  # a pipe in a parametrized id would end the table cell
        print(f"| `{cell}` | [history]({base}/{benchmark_page(ALL, nodeid)}) |")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="s2st-history", description="Keep every run in a results database and see it "
                                                            "over time (trend site, change points, alerts).")
    parser.add_argument("--db", default=os.environ.get("S2ST_HISTORY") or ".benchmarks/s2st-history.sqlite",
                        help="the database: a path, sqlite:///PATH or postgresql://... (default: $S2ST_HISTORY, "
                             "else .benchmarks/s2st-history.sqlite)")
    sub = parser.add_subparsers(dest="command", required=True)
    imp = sub.add_parser("import", help="add saved runs (files or folders of *.json)")
    imp.add_argument("runs", nargs="+", type=path_arg)
    site = sub.add_parser("site", help="write the static trend site")
    site.add_argument("out", type=path_arg)
    site.add_argument("--commit-url", help="a link for each point, with {commit} (e.g. "
                                           "https://github.com/OWNER/REPO/commit/{commit})")
    check_help = ("exit 1 when a series is worse at its newest run: a change point in the bad direction within the "
                  "last --window runs still in force, or the newest value past the window threshold; exit 2 when "
                  "there is nothing to judge (no database, no run, nothing matching)")
    check = sub.add_parser("check", help=check_help, description=check_help)
    check.add_argument("--branch")
    check.add_argument("--machine")
    check.add_argument("--benchmark", help="only the benchmarks whose test id contains this text")
    check.add_argument("--test", choices=("t", "z", "percent"), default="t")
    check.add_argument("--boundary", type=_fraction, default=0.999,
                       help="t/z: the one-sided quantile past which a value fires (default 0.999); percent: the "
                            "fraction off the window's mean (0.05 = 5 %%)")
    check.add_argument("--window", type=int_in(2, 10_000), default=30,
                       help="runs of history judged against, and how recent a change point must be to fail")
    links = sub.add_parser("links", help="markdown links to each test id's trend page on the published site")
    links.add_argument("site_url", help="where the site is published, e.g. https://OWNER.github.io/REPO")
    links.add_argument("nodeids", nargs="*", help="test ids (default: read from standard input)")
    args = parser.parse_args(argv)
    try:
        return {"import": _import, "site": _site, "check": _check, "links": _links}[args.command](args)
    except S2STError as exc:
        return refuse("s2st-history", exc)
    except OSError as exc:
        return refuse("s2st-history", f"{exc.filename or ''}: {exc.strerror or exc}")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
