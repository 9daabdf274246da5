"""Benchmark YAML -> one validated CaseConfig (general + per-stage argument dicts).

The stage merge is the upstream fairseq ``get_metrics.py`` one: stage i is a deep copy of
``general`` updated with ``stage{i}``, for i = 1, 2, 3 while present. On top of upstream we:
reject duplicate keys (upstream's published 3StageS2ST.yaml silently loses a stage), expand
``${VAR}`` / ``$VAR`` placeholders from the environment, resolve relative paths against the
YAML's folder, and let explicit command-line overrides win over ``general`` in every stage.
"""
from __future__ import annotations

import copy
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .errors import S2STError

SECTIONS = ("general", "stage1", "stage2", "stage3", "quality")
STAGE_SECTIONS = ("stage1", "stage2", "stage3")

# Keys whose string values are file system paths, resolved against the YAML's folder.
# config_yaml is deliberately absent: fairseq resolves it against `data`.
PATH_KEYS = frozenset({
    "dataset_path", "data", "vocoder", "vocoder_cfg", "dump_speech_waveforms_dir",
    "workload", "model_dir", "anchors",
})
# fairseq's --vocoder is either a vocoder kind (TTS stages) or a checkpoint path (S2UT stage 2)
VOCODER_KINDS = frozenset({"griffin_lim", "hifigan", "code_hifigan"})
ENSEMBLE_PATH_KEY = "path"  # fairseq: several checkpoints joined by ':'
ENTRY_KEY = "entry"  # "some/file.py:attr" (file part resolved) or "pkg.module:attr" (left alone)

_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
_ENTRY_FILE = re.compile(r"^(.+\.py):([A-Za-z_][\w.]*)$")


@dataclass(frozen=True)
class CaseConfig:
    path: Path  # absolute path of the YAML
    case_id: str  # f"{model_type}-{name}"; name = general["name"] or the file stem
    model_type: str
    general: dict[str, Any]
    stages: list[dict[str, Any]]
    quality: dict[str, Any] | None
    lines: dict[str, int]  # "general.dataset_size" -> line in the YAML

    def where(self, key: str) -> str:
        """'path/x.yaml:7 (general.dataset_size)', or without ':7' when the line is unknown."""
        line = self.lines.get(key)
        return f"{self.path}:{line} ({key})" if line else f"{self.path} ({key})"


class _DuplicateKey(Exception):
    def __init__(self, key: Any, line: int, first: int):
        super().__init__(f"{line}: duplicate key {key!r} (first at line {first})")
        self.key, self.line, self.first = key, line, first


class _StrictSafeLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate mapping keys (YAML would keep the last one silently)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # '<<' merges may legitimately repeat keys
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:  # unhashable key: let the base class report it
                    continue
                line = key_node.start_mark.line + 1
                if first is not None:
                    raise _DuplicateKey(key, line, first)
                seen[key] = line
        return super().construct_mapping(node, deep=deep)


def _collect_lines(node: yaml.Node, prefix: str, out: dict[str, int]) -> None:
    """Dotted key path -> 1-based line of the key (list items: of the item)."""
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                continue
            key = f"{prefix}.{key_node.value}" if prefix else str(key_node.value)
            out.setdefault(key, key_node.start_mark.line + 1)
            _collect_lines(value_node, key, out)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            key = f"{prefix}.{i}"
            out.setdefault(key, item.start_mark.line + 1)
            _collect_lines(item, key, out)


def _read_yaml(path: Path) -> tuple[Any, dict[str, int]]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise S2STError(f"{path}: config file not found") from None
    except (OSError, UnicodeDecodeError) as e:
        raise S2STError(f"{path}: cannot read config file: {e}") from None
    loader = _StrictSafeLoader(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except _DuplicateKey as e:
        raise S2STError(f"{path}:{e}") from None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = f":{mark.line + 1}" if mark else ""
        problem = e.problem or e.context or str(e)
        raise S2STError(f"{path}{line}: YAML syntax error: {problem}") from None
    except yaml.YAMLError as e:
        raise S2STError(f"{path}: YAML syntax error: {' '.join(str(e).split())}") from None
    finally:
        loader.dispose()
    lines: dict[str, int] = {}
    if node is not None:
        _collect_lines(node, "", lines)
    return data, lines


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _expand_env(value: Any, key: str, path: Path, lines: Mapping[str, int]) -> Any:
    """Expand ${VAR} and $VAR inside strings, at any depth; an unset variable is an error."""
    if isinstance(value, str):
        def sub(m: re.Match) -> str:
            name = m.group(1) or m.group(2)
            if name not in os.environ:
                line = lines.get(key)
                loc = f"{path}:{line}" if line else str(path)
                raise S2STError(f"{loc}: {key}: environment variable {name!r} is not set")
            return os.environ[name]
        return _VAR.sub(sub, value)
    if isinstance(value, dict):
        return {k: _expand_env(v, f"{key}.{k}", path, lines) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand_env(v, f"{key}.{i}", path, lines) for i, v in enumerate(value)]
    return value


def _resolve_one(p: str, base: Path) -> str:
    if not p or "://" in p:
        return p
    return os.path.abspath(os.path.join(base, os.path.expanduser(p)))


def _resolve_paths(section: dict[str, Any], base: Path) -> dict[str, Any]:
    out = dict(section)
    for key, value in section.items():
        if not isinstance(value, str) or not value:
            continue
        if key == "vocoder" and value in VOCODER_KINDS:
            continue
        if key in PATH_KEYS:
            out[key] = _resolve_one(value, base)
        elif key == ENSEMBLE_PATH_KEY:
            out[key] = value if "://" in value else ":".join(_resolve_one(p, base) for p in value.split(":"))
        elif key == ENTRY_KEY:
            m = _ENTRY_FILE.match(value)
            if m:
                out[key] = f"{_resolve_one(m.group(1), base)}:{m.group(2)}"
    return out


def load_config(
    path: str | os.PathLike,
    *,
    known_model_types: Iterable[str],
    overrides: Mapping[str, Any] | None = None,
) -> CaseConfig:
    """Read, validate and merge one benchmark YAML.

    ``overrides`` are explicit command-line values: they replace ``general`` keys before the
    stage merge, so every stage sees them. ``None`` values mean "not given" and are ignored.
    Their relative paths resolve against the current directory (they were typed there);
    those in the YAML resolve against the YAML's folder.
    """
    path = Path(os.path.abspath(os.path.expanduser(os.fspath(path))))
    data, lines = _read_yaml(path)
    base = path.parent

    def at(key: str) -> str:
        line = lines.get(key)
        return f"{path}:{line}" if line else str(path)

    if not isinstance(data, dict):
        got = "an empty file" if data is None else _type_name(data)
        raise S2STError(f"{path}: top level must be a mapping of {', '.join(SECTIONS)}; got {got}")
    for key, value in data.items():
        if key not in SECTIONS:
            raise S2STError(f"{at(str(key))}: unknown top-level key {key!r}; allowed: {', '.join(SECTIONS)}")
        if not isinstance(value, dict):
            raise S2STError(f"{at(key)}: {key} must be a mapping, got {_type_name(value)}")
    for i, name in enumerate(STAGE_SECTIONS[1:], start=1):
        if name in data and STAGE_SECTIONS[i - 1] not in data:
            raise S2STError(
                f"{at(name)}: {name} given without {STAGE_SECTIONS[i - 1]}; stages must be numbered 1, 2, 3 without gaps"
            )

    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    # overridden keys are not expanded: `--dataset-path x` must work with an unset $npy_dataset
    kept = {k: v for k, v in data.get("general", {}).items() if k not in given}
    general = _resolve_paths(_expand_env(kept, "general", path, lines), base)
    for key in given:  # the YAML line no longer describes an overridden value
        lines.pop(f"general.{key}", None)
    general.update(_resolve_paths(given, Path.cwd()))

    known = sorted(known_model_types)
    model_type = general.get("model_type")
    if model_type is None:
        raise S2STError(
            f"{path}: general.model_type is required (in the YAML or on the command line); known: {', '.join(known)}"
        )
    if not isinstance(model_type, str) or model_type not in known:
        raise S2STError(f"{at('general.model_type')}: unknown model_type {model_type!r}; known: {', '.join(known)}")
    serves = general.get("serves_speech")
    if serves is not None and not isinstance(serves, bool):
        raise S2STError(f"{at('general.serves_speech')} (general.serves_speech): must be true or false, got {serves!r}")

    stages: list[dict[str, Any]] = []
    for name in STAGE_SECTIONS:  # upstream: stop at the first missing stage
        if name not in data:
            break
        stage = copy.deepcopy(general)
        stage.update(_resolve_paths(_expand_env(data[name], name, path, lines), base))
        stages.append(stage)

    name = general.get("name")
    case_name = str(name) if name not in (None, "") else path.stem
    return CaseConfig(
        path=path,
        case_id=f"{model_type}-{case_name}",
        model_type=model_type,
        general=general,
        stages=stages,
        quality=data.get("quality"),
        lines=lines,
    )
