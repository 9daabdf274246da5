"""What the console scripts share: a parser whose usage errors are ONE line (exit 2), argument types that
refuse a bad value while parsing (the error names the option, as argparse does), and the one error line.

A value the script cannot use is refused here, before any model is built or any server bound: a NUL in a path,
an empty path, a number outside the range the value is used in (a port, a seed numpy takes, a sleep time).
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Callable, NoReturn

from ..inputs import show

MAX_MESSAGE = 2000  # characters of one error line


def one_line(message: object) -> str:
    """An error message as one line: anything non-printable (a newline in a path, a NUL) escaped."""
    return show(message, MAX_MESSAGE)


def refuse(prog: str, message: object) -> int:
    """Print ``<prog>: error: <message>`` as one line on stderr; the exit code of a refused input (2)."""
    print(f"{prog}: error: {one_line(message)}", file=sys.stderr)
    return 2


def _quoted(value: str) -> str:
    return f"'{show(value, 80)}'"


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr (no usage block), exit code 2; its subparsers too."""

    def error(self, message: str) -> NoReturn:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {one_line(message)}\n")


def path_arg(value: str) -> Path:
    """A path option: not empty (it would mean the current directory) and without a NUL byte."""
    if not value:
        raise argparse.ArgumentTypeError("an empty path")
    if "\0" in value:
        raise argparse.ArgumentTypeError(f"{_quoted(value)}: a path cannot hold a NUL byte")
    return Path(value)


def int_in(low: int, high: int | None = None) -> Callable[[str], int]:
    """An integer option in [low, high] (no upper bound when high is None)."""
    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            number = None
        if number is None or number < low or (high is not None and number > high):
            span = f"from {low} to {high}" if high is not None else f"of at least {low}"
            raise argparse.ArgumentTypeError(f"{_quoted(value)}: expected an integer {span}")
        return number
    return parse


def float_in(low: float, high: float) -> Callable[[str], float]:
    """A finite number option in [low, high] (nan and inf refused)."""
    def parse(value: str) -> float:
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not (math.isfinite(number) and low <= number <= high):
            raise argparse.ArgumentTypeError(f"{_quoted(value)}: expected a number from {low:g} to {high:g}")
        return number
    return parse
