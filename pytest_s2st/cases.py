"""A benchmark case: one loaded config plus its settings resolved by precedence (pytest-free).

Precedence, highest first: explicit command-line flag, the config's ``general`` section, the
ini value, the built-in default (see settings.py).
"""
from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from .config import CaseConfig, load_config
from .errors import S2STError
from .inputs import show
from .measure.device import resolve_device
from .pipelines.base import check_stage_count, known_model_types, serves_speech, text_fields
from .settings import BY_NAME, SETTINGS, CompareLimit

# upstream get_metrics.py names that mean one of our settings
ALIASES = {"dump_dir": ("dump_speech_waveforms_dir",)}


@dataclass
class Case:
    config: CaseConfig
    settings: dict[str, Any]
    _device: Any = field(default=None, repr=False)

    @property
    def case_id(self) -> str:
        return self.config.case_id

    @property
    def model_type(self) -> str:
        return self.config.model_type

    @property
    def serves_speech(self) -> bool:
        """Whether the reference server can serve this case (text request in, speech out): the model
        type's answer (pipelines.base.MODEL_TYPES), else general.serves_speech, else yes."""
        # a bool: load_config checked it
        return serves_speech(self.model_type, self.config.general.get("serves_speech"))

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable: the loaded config and the resolved settings (how the case reaches a server process)."""
        c = self.config
        return {
            "path": str(c.path), "case_id": c.case_id, "model_type": c.model_type,
            "general": _jsonable(c.general), "stages": _jsonable(c.stages), "quality": _jsonable(c.quality),
            "serve": _jsonable(c.serve), "lines": dict(c.lines), "settings": settings_to_json(self.settings),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Case":
        """Inverse of to_dict (settings back to their parsed types); nothing is re-read or re-resolved."""
        config = CaseConfig(
            path=Path(d["path"]), case_id=d["case_id"], model_type=d["model_type"], general=dict(d["general"]),
            stages=[dict(s) for s in d["stages"]], quality=None if d.get("quality") is None else dict(d["quality"]),
            lines={str(k): int(v) for k, v in d["lines"].items()},
            serve=None if d.get("serve") is None else dict(d["serve"]),
        )
        return cls(config, settings_from_json(d["settings"]))

    def device(self):
        """Resolved lazily: 'cuda'/'npu' import torch, which a collection-only run must not pay for."""
        if self._device is None:
            self._device = resolve_device(self.settings["device"])
        return self._device

    def samples(self, where: str) -> list[dict]:
        """The case's dataset (npy, raw or text: a text sample needs only the fields its model type reads),
        dataset_size applied; ``where`` names the config section that asked, for the no-dataset line."""
        from .datasets import load_dataset  # lazy: heavy

        general = self.config.general
        if general.get("dataset_path") is None:
            raise S2STError(f"{where}: no dataset: set general.dataset_path or --s2st-dataset-path")
        return load_dataset(general["dataset_path"], self.settings["dataset_type"], self.settings["dataset_size"],
                            sample_rate=int(general.get("sample_rate", 16000)),
                            text_fields=text_fields(self.model_type))


def _jsonable(value: Any) -> Any:
    """Tuples -> lists, recursively; YAML scalars JSON lacks (dates, bytes) and non-string keys -> str."""
    if isinstance(value, dict):
        return {k if isinstance(k, str) else str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def settings_to_json(settings: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in settings.items():
        if name == "compare_fail" and value is not None:  # its text form rounds the limits (:g)
            out[name] = [{"metric": c.metric, "limit": c.limit, "percent": c.percent} for c in value]
        else:
            out[name] = _jsonable(value)
    return out


def settings_from_json(data: Mapping[str, Any]) -> dict[str, Any]:
    """settings_to_json's inverse: each value through its SETTINGS parser (lists back to tuples)."""
    out: dict[str, Any] = {}
    for name, value in data.items():
        setting = BY_NAME.get(name)
        if value is None or setting is None:
            out[name] = value
        elif name == "compare_fail":
            out[name] = tuple(CompareLimit(c["metric"], float(c["limit"]), bool(c["percent"])) for c in value)
        else:
            out[name] = setting.parse(value)
    return out


def resolve_settings(general: Mapping[str, Any], explicit: Mapping[str, Any], ini: Callable[[str], Any],
                     where: Callable[[str], str], sources: dict[str, str] | None = None) -> dict[str, Any]:
    """Every setting by precedence; ``sources`` (when given) receives where each value came from
    (flag, file:line of the config key, ini key, or default), for error lines."""
    out: dict[str, Any] = {}
    came: dict[str, str] = {} if sources is None else sources
    for setting in SETTINGS:
        name = setting.name
        if name in explicit:
            out[name], came[name] = explicit[name], setting.flag
            continue
        keys = (name,) + ALIASES.get(name, ())
        key = next((k for k in keys if k in general), None) if setting.per_case else None
        if key is not None:
            try:
                out[name], came[name] = setting.parse(general[key]), where(key)
            except ValueError as exc:
                raise S2STError(f"{where(key)}: {exc}") from None
            continue
        raw = ini(setting.ini)
        if raw not in (None, "", []):
            try:
                out[name], came[name] = setting.parse(raw), f"ini option {setting.ini}"
            except ValueError as exc:
                raise S2STError(f"ini option {setting.ini}: {exc}") from None
            continue
        out[name], came[name] = setting.default, f"{setting.flag} (default)"
    if general.get("cpu") is True and "device" not in explicit and "device" not in general:
        out["device"] = "cpu"  # upstream configs say `cpu: True`
    return out


def check_writable_dir(path: str, where: str) -> Path:
    target = Path(path).expanduser()
    try:
        target.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=target, prefix=".s2st-write-check-"):
            pass
    except OSError as exc:
        raise S2STError(f"{where}: dump dir {target} is not writable: {exc.strerror or exc}") from None
    return target


def _check_target_sr(config: CaseConfig) -> None:
    """target_sr (the dump's sample rate) is a positive integer wherever it is set."""
    sections = [("general", config.general)] + [(f"stage{i}", st) for i, st in enumerate(config.stages, 1)]
    for name, section in sections:
        value = section.get("target_sr")
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
            raise S2STError(f"{config.where(f'{name}.target_sr')}: target_sr must be a sample rate in Hz "
                            f"(an integer > 0), got {value!r}")


ENDPOINT_SOURCE = "--s2st-endpoint"


def external_case(case_id: str, explicit: Mapping[str, Any], ini: Callable[[str], Any]) -> Case:
    """The one case of an external endpoint benchmarked without a config (service/bench.external_case_name
    names it from the server): no stages, settings from flags, ini and defaults."""
    config = CaseConfig(path=Path(ENDPOINT_SOURCE), case_id=case_id, model_type="external", general={},
                        stages=[], quality=None, lines={})
    return Case(config, resolve_settings({}, explicit, ini, lambda key: f"{ENDPOINT_SOURCE} ({key})"))


def load_case(path: str | os.PathLike, explicit: Mapping[str, Any], ini: Callable[[str], Any]) -> Case:
    """One config resolved once: every section, path and setting, checked before any model loads."""
    overrides = {k: explicit[k] for k in ("model_type", "dataset_path") if k in explicit}
    config = load_config(path, known_model_types=known_model_types(), overrides=overrides)
    check_stage_count(config.model_type, len(config.stages), str(config.path))
    _check_target_sr(config)
    where = lambda key: config.where(f"general.{key}")
    sources: dict[str, str] = {}
    settings = resolve_settings(config.general, explicit, ini, where, sources)
    dataset = config.general.get("dataset_path")
    if dataset is not None:
        source = "--s2st-dataset-path" if "dataset_path" in explicit else where("dataset_path")
        if not isinstance(dataset, (str, os.PathLike)) or isinstance(dataset, bool):
            raise S2STError(f"{source}: dataset_path must be a path (a string), got {type(dataset).__name__}")
        try:
            exists = Path(dataset).exists()
        except (OSError, ValueError) as exc:  # a name too long, a NUL byte: no such dataset either
            raise S2STError(f"{source}: dataset {str(dataset)[:200]!r} cannot be read: {type(exc).__name__}") from None
        if not exists:
            raise S2STError(f"{source}: dataset {dataset} does not exist")
    if settings.get("dump_dir"):
        settings["dump_dir"] = str(check_writable_dir(settings["dump_dir"], sources["dump_dir"]))
    # auto -> the target language's tokenizer, now: a refusal is a usage error
    from .quality.translation import case_tokenize  # lazy: plugin load

    settings["bleu_tokenize"] = case_tokenize(settings["bleu_tokenize"], config.general, config.stages, config.where,
                                              sources["bleu_tokenize"])
    _check_references(config, settings)
    return Case(config, settings)


def _check_references(config: CaseConfig, settings: Mapping[str, Any]) -> None:
    """general.references read now, before any test runs: a missing, unreadable (Latin-1, UTF-16) or short file was
    named only after the whole measurement had run. Short: fewer lines than the samples the case runs (the
    dataset's count, read cheaply, dataset_size applied)."""
    references = config.general.get("references")
    if references is None:
        return
    from .datasets import dataset_count  # lazy: heavy
    from .quality.translation import read_references  # lazy: plugin load

    where = config.where("general.references")
    lines = read_references(references, where)
    dataset = config.general.get("dataset_path")
    if dataset is None:
        return  # no dataset yet: s2st_dataset says so
    count = dataset_count(dataset, settings["dataset_type"], text_fields(config.model_type))
    size = settings.get("dataset_size")
    wanted = min(count, size) if count is not None and size else count
    if wanted is not None and len(lines) < wanted:  # the file named first: the key alone hid which file was short
        raise S2STError(f"{show(str(references))} ({where}): {len(lines)} reference line(s) for {wanted} sample(s) "
                        f"of {show(str(dataset))}: one line per sample, in dataset order")
