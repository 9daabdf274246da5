"""Service workloads: JSON lines {id, text, language, voice, seed, instruct?}.

The default (pytest_s2st/data/workload-default.jsonl) is 12 original sentences, alternating
Chinese and English and two voices, with fixed seeds: both sides of a comparison get the same input.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Sequence

from .errors import S2STError
from .inputs import parse_json, read_text, show

DEFAULT_WORKLOAD = Path(__file__).resolve().parent / "data" / "workload-default.jsonl"

REQUIRED_FIELDS = ("id", "text", "language", "voice", "seed")  # what a request to any speech server carries
_OPTIONAL = ("instruct",)
_FIELDS = REQUIRED_FIELDS + _OPTIONAL
_LINES = re.compile(r"\r\n|\r|\n")
MAX_WORKLOAD_BYTES = 64 * 2**20  # a workload is sentences: far below this


def _short(value: object) -> str:
    text = repr(value)  # repr: one line, whatever the value holds
    return text if len(text) <= 80 else text[:77] + "..."


def _check_item(item: object, where: str, seen: set[str], required: Sequence[str]) -> dict:
    if not isinstance(item, dict):
        raise S2STError(f"{where}: expected a JSON object, got {type(item).__name__}")
    for key in item:
        if key not in _FIELDS:
            raise S2STError(f"{where}: unknown field {_short(key)}; fields are {', '.join(_FIELDS)}")
    for key in _FIELDS:
        if key in required and key not in item:
            raise S2STError(f"{where}: missing field {key!r}")
    for key in ("id", "text", "language", "voice") + _OPTIONAL:
        if key not in item:
            continue
        value = item[key]
        if not isinstance(value, str) or not value.strip():
            raise S2STError(f"{where}: field {key!r} must be a non-empty string, got {_short(value)}")
        try:  # JSON's "\ud800" escape parses to a lone surrogate, which no request body can carry
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise S2STError(f"{where}: field {key!r} holds a lone surrogate {value[exc.start]!r} at character "
                            f"{exc.start}, not valid Unicode text") from None
    seed = item.get("seed")
    if "seed" in item and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63):
        raise S2STError(f"{where}: field 'seed' must be an integer in [0, 2**63), got {_short(seed)}")
    if item["id"] in seen:
        raise S2STError(f"{where}: field 'id' {_short(item['id'])} repeats an earlier line")
    seen.add(item["id"])
    return dict(item)


def load_workload(path: str | Path | None = None, required: Sequence[str] = REQUIRED_FIELDS) -> list[dict]:
    """Validated workload items in file order; S2STError names file:line and the field at fault.
    ``required``: the fields every item must have besides id and text (a text dataset: its model type's
    pipelines.base.ModelType.text_fields); the others are checked when they are there."""
    path = Path(path) if path is not None else DEFAULT_WORKLOAD

    text = read_text(path, "workload", MAX_WORKLOAD_BYTES, encoding="utf-8-sig")
    items: list[dict] = []
    seen: set[str] = set()
    # not splitlines(): it also cuts at U+2028, \x85, ... which JSON strings may hold as they are
    for lineno, line in enumerate(_LINES.split(text), 1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"

        item = parse_json(line, where)  # NaN/Infinity and too-deep nesting refused, one line
        items.append(_check_item(item, where, seen, ("id", "text", *required)))
    if not items:
        raise S2STError(f"{path}: workload has no items")
    return items
