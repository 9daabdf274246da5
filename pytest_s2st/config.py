"""Benchmark YAML -> one validated CaseConfig (general + per-stage argument dicts).

The stage merge is the upstream fairseq ``get_metrics.py`` one: stage i is a deep copy of
``general`` updated with ``stage{i}``, for i = 1, 2, 3 while present. On top of upstream we:
reject duplicate keys (upstream's published 3StageS2ST.yaml silently loses a stage), expand
``${VAR}`` / ``$VAR`` placeholders from the environment, resolve relative paths against the
YAML's folder, and let explicit command-line overrides win over ``general`` in every stage.
Paths are resolved here and nowhere else: the generic keys below, those the model type declares
(pipelines.base.MODEL_TYPES) and the gate's file keys of ``quality:``.
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
from .gate import check_plugin_keys, gate_policy, quality_keys
from .inputs import closest, finite, read_text, show, yaml_node
from .pipelines.base import model_type_info
from .settings import SETTINGS

SECTIONS = ("general", "stage1", "stage2", "stage3", "quality", "serve")
STAGE_SECTIONS = ("stage1", "stage2", "stage3")

# Keys whose string values are file system paths, resolved against the YAML's folder, for every
# model type; a model type adds its own (pipelines.base.MODEL_TYPES). config_yaml is deliberately
# absent: fairseq resolves it against `data`.
PATH_KEYS = frozenset({
    "dataset_path", "data", "vocoder", "vocoder_cfg", "dump_speech_waveforms_dir",
    "workload", "model_dir", "anchors", "references",
})
# fairseq's --vocoder is either a vocoder kind (TTS stages) or a checkpoint path (S2UT stage 2)
VOCODER_KINDS = frozenset({"griffin_lim", "hifigan", "code_hifigan"})
QUALITY_PATH_KEYS = ("baseline", "anchors", "asr_model_dir")  # gate.PLUGIN_KEYS that name files
TARGET_KEYS = frozenset({"ttfa_s", "rtf"})

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
    serve: dict[str, Any] | None = None  # the reference server's options (service/stream.py checks them)

    def where(self, key: str) -> str:
        """'path/x.yaml:7 (general.dataset_size)', or without ':7' when the line is unknown."""
        return _where(self.path, self.lines, key)

    @property
    def name(self) -> str:
        """The config's name: general.name, else the file's stem (the case id less its model type)."""
        return self.case_id[len(self.model_type) + 1:]


def _where(path: Path, lines: Mapping[str, int], key: str) -> str:
    line = lines.get(key)
    return f"{path}:{line} ({key})" if line else f"{path} ({key})"


def _at(path: Path, lines: Mapping[str, int], key: str) -> str:
    line = lines.get(key)
    return f"{path}:{line}" if line else str(path)


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


MAX_CONFIG_CHARS = 1_000_000  # a benchmark config is a few dozen lines; anything near this is not one


def _read_yaml(path: Path) -> tuple[Any, dict[str, int]]:
    # utf-8: at most 4 bytes a character; the bounded reader refuses FIFOs, devices, directories, loops
    text = read_text(path, "config file", MAX_CONFIG_CHARS * 4)
    if len(text) > MAX_CONFIG_CHARS:
        raise S2STError(f"{path}: config file is {len(text)} characters, more than {MAX_CONFIG_CHARS}")
    loader = None
    try:
        # the strict loader's reader refuses non-printable characters at once; an alias bomb is refused
        # before it is expanded (inputs.yaml_node)
        node, loader = yaml_node(text, show(str(path)), _StrictSafeLoader)
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
    except RecursionError:
        raise S2STError(f"{path}: config is nested too deep") from None
    finally:
        if loader is not None:
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


def resolve_paths(section: dict[str, Any], base: Path, model_type: str) -> dict[str, Any]:
    """The section with its file values made absolute against ``base``: the generic PATH_KEYS and the model
    type's path keys; its ensemble keys as ':'-joined files; its entry keys' file part of "file.py:attr"."""
    row = model_type_info(model_type)
    keys = PATH_KEYS | frozenset(row.path_keys)
    out = dict(section)
    for key, value in section.items():
        if not isinstance(value, str) or not value:
            continue
        if key == "vocoder" and value in VOCODER_KINDS:
            continue
        if key in row.ensemble_keys:
            out[key] = value if "://" in value else ":".join(_resolve_one(p, base) for p in value.split(":"))
        elif key in keys:
            out[key] = _resolve_one(value, base)
        elif key in row.entry_keys:
            m = _ENTRY_FILE.match(value)
            if m:
                out[key] = f"{_resolve_one(m.group(1), base)}:{m.group(2)}"
    return out


def _check_sections(data: Any, path: Path, lines: Mapping[str, int]) -> None:
    if not isinstance(data, dict):
        got = "an empty file" if data is None else _type_name(data)
        raise S2STError(f"{path}: top level must be a mapping of {', '.join(SECTIONS)}; got {got}")
    for key, value in data.items():
        if key not in SECTIONS:
            import difflib  # lazy: plugin load

            # a close cutoff: 'qualty' means quality, but 'stage4' is no typo of stage3
            match = difflib.get_close_matches(str(key), SECTIONS, n=1, cutoff=MISSPELT)
            hint = f" (did you mean {match[0]!r}?)" if match else ""
            raise S2STError(f"{_at(path, lines, str(key))}: unknown top-level key {show(repr(key))}{hint}; "
                            f"allowed: {', '.join(SECTIONS)}")
        if not isinstance(value, dict):
            raise S2STError(f"{_at(path, lines, key)}: {key} must be a mapping, got {_type_name(value)}")
    for i, name in enumerate(STAGE_SECTIONS[1:], start=1):
        if name in data and STAGE_SECTIONS[i - 1] not in data:
            raise S2STError(
                f"{_at(path, lines, name)}: {name} given without {STAGE_SECTIONS[i - 1]}; "
                "stages must be numbered 1, 2, 3 without gaps"
            )


def _check_general(general: Mapping[str, Any], path: Path, lines: Mapping[str, int], known: list[str]) -> str:
    """Validate what the plugin itself reads from ``general``; return the model type."""
    model_type = general.get("model_type")
    if model_type is None:
        raise S2STError(
            f"{path}: general.model_type is required (in the YAML or on the command line); known: {', '.join(known)}"
        )
    if not isinstance(model_type, str) or model_type not in known:
        raise S2STError(f"{_at(path, lines, 'general.model_type')}: unknown model_type {model_type!r}; "
                        f"known: {', '.join(known)}")
    _check_misspelt_settings(general, path, lines)
    _check_plugin_keys(general, path, lines)
    serves = general.get("serves_speech")
    if serves is not None and not isinstance(serves, bool):
        raise S2STError(f"{_at(path, lines, 'general.serves_speech')} (general.serves_speech): "
                        f"must be true or false, got {serves!r}")
    targets = general.get("targets")  # goodput: {ttfa_s: x, rtf: y}
    if targets is not None and (not isinstance(targets, dict) or not set(targets) <= TARGET_KEYS
                                or not all(_positive_number(v) for v in targets.values())):
        typo = next((k for k in targets if k not in TARGET_KEYS), None) if isinstance(targets, dict) else None
        hint = f" (unknown key {show(repr(typo))}{closest(typo, sorted(TARGET_KEYS))})" if typo is not None else ""
        raise S2STError(f"{_where(path, lines, 'general.targets')}: targets must map ttfa_s and/or rtf to "
                        f"numbers > 0, got {show(repr(targets))}{hint}")
    return model_type


# general keys the plugin reads that are no setting (settings.SETTINGS): what a typo of them would silently drop
PLUGIN_GENERAL_KEYS = ("model_type", "name", "dataset_path", "references", "target_lang", "serves_speech", "targets",
                       "target_sr", "dump_waveform_file_prefix")


def _check_plugin_keys(general: Mapping[str, Any], path: Path, lines: Mapping[str, int]) -> None:
    """The types of the general keys the plugin reads itself (a list of references or a number as the
    target language was a TypeError deep in the scorer, or silently no score)."""
    references = general.get("references")
    if references is not None and (not isinstance(references, str) or not references.strip()):
        got = ("an empty string" if isinstance(references, str)
               else f"{_type_name(references)} {show(repr(references), 80)}")
        raise S2STError(f"{_where(path, lines, 'general.references')}: must be the path of a text file, one "
                        f"reference translation per line in dataset order; got {got}")
    language = general.get("target_lang")
    if language is not None and (not isinstance(language, str) or not language.strip()):
        raise S2STError(f"{_where(path, lines, 'general.target_lang')}: must be a language code (e.g. en), got "
                        f"{_type_name(language)} {show(repr(language), 80)}")


# difflib ratio: 'dataset_sise' -> 'dataset_size' (0.92); fairseq's own 'device_id' -> 'device' (0.8) is kept
MISSPELT = 0.85


def _check_misspelt_settings(general: Mapping[str, Any], path: Path, lines: Mapping[str, int]) -> None:
    """``general`` also carries fairseq's own arguments, so an unknown key is not an error -- but one within a letter
    or two of a plugin setting (``dataset_sise: 2``) was silently ignored: it names the setting it meant."""
    import difflib  # lazy: plugin load

    names = [s.name for s in SETTINGS if s.per_case] + list(PLUGIN_GENERAL_KEYS)
    for key in general:
        if not isinstance(key, str) or key in names:
            continue
        match = difflib.get_close_matches(key, names, n=1, cutoff=MISSPELT)
        if match:
            raise S2STError(f"{_at(path, lines, f'general.{key}')}: unknown key general.{key} (did you mean "
                            f"{match[0]!r}?); as written it would be passed on to the model and the setting ignored")


def _positive_number(value: Any) -> bool:
    number = finite(value)  # inf is no target: a number that is not finite is missing evidence
    return number is not None and number > 0



def _resolve_quality(quality: dict[str, Any] | None, base: Path) -> dict[str, Any] | None:
    """The plugin's path keys of ``quality:``; the rest (the policy) is left as written."""
    if quality is None:
        return None
    out = dict(quality)
    for key in QUALITY_PATH_KEYS:
        value = out.get(key)
        if isinstance(value, str) and value and "://" not in value:
            value = os.path.expanduser(value)
            out[key] = value if os.path.isabs(value) else os.path.abspath(os.path.join(base, value))
    return out


def _merge_general(data: dict, path: Path, lines: dict[str, int], overrides: Mapping[str, Any] | None,
                   known: list[str]) -> tuple[str, dict[str, Any]]:
    """(model_type, general): the YAML's general expanded, overrides on top, paths resolved."""
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    # overridden keys are not expanded: `--dataset-path x` must work with an unset $npy_dataset
    kept = {k: v for k, v in data.get("general", {}).items() if k not in given}
    kept = _expand_env(kept, "general", path, lines)
    for key in given:  # the YAML line no longer describes an overridden value
        lines.pop(f"general.{key}", None)
    model_type = _check_general({**kept, **given}, path, lines, known)
    general = resolve_paths(kept, path.parent, model_type)
    general.update(resolve_paths(given, Path.cwd(), model_type))
    return model_type, general


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
    those in the YAML resolve against the YAML's folder. Path keys are the generic PATH_KEYS
    plus those the model type declares (pipelines.base.MODEL_TYPES).
    """
    path = Path(os.path.abspath(os.path.expanduser(os.fspath(path))))
    data, lines = _read_yaml(path)
    _check_sections(data, path, lines)
    model_type, general = _merge_general(data, path, lines, overrides, sorted(known_model_types))

    stages: list[dict[str, Any]] = []
    for name in STAGE_SECTIONS:  # upstream: stop at the first missing stage
        if name not in data:
            break
        stage = copy.deepcopy(general)
        stage.update(resolve_paths(_expand_env(data[name], name, path, lines), path.parent, model_type))
        stages.append(stage)

    name = general.get("name")
    case_name = str(name) if name not in (None, "") else path.stem
    if data.get("quality") is not None:  # the policy is checked when the case is resolved, for every test
        for key in data["quality"]:  # an unknown key named at its own line (gate_policy knows the section's)
            if key not in quality_keys():
                raise S2STError(f"{_where(path, lines, f'quality.{key}')}: unknown key {show(repr(key))}"
                                f"{closest(key, quality_keys())}; known: {', '.join(sorted(quality_keys()))}")
        check_plugin_keys(data["quality"], lambda key: _where(path, lines, f"quality.{key}"))
        gate_policy(data["quality"], None, f"{_at(path, lines, 'quality')}: quality")
    serve = data.get("serve")
    if serve is not None:
        from .service.stream import SERVE_KEYS, parse_serve  # lazy: plugin load

        for key in serve:  # parse_serve names an unknown key; here with its line and what it meant
            if key not in SERVE_KEYS:
                raise S2STError(f"{_where(path, lines, f'serve.{key}')}: unknown key {show(repr(key))}"
                                f"{closest(key, SERVE_KEYS)}; known: {', '.join(SERVE_KEYS)}")

        parse_serve(serve, _at(path, lines, "serve"))  # checked at load: s2st-serve reads it
    return CaseConfig(
        path=path,
        case_id=f"{model_type}-{case_name}",
        model_type=model_type,
        general=general,
        stages=stages,
        quality=_resolve_quality(data.get("quality"), path.parent),
        lines=lines,
        serve=None if serve is None else dict(serve),
    )
