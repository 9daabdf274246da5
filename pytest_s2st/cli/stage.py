"""s2st-stage OUT: build the tiny real fairseq models, datasets and configs into OUT.

With qwen-tts installed (the qwen extra) it also builds the tiny random Qwen3-TTS into OUT/qwen3tts
(with its model-assets.json manifest) and OUT/configs/Qwen3TTS.yaml; --no-qwen skips it.

--size full builds the released architectures at their released sizes instead (random weights, ~1 GB
of fairseq checkpoints, plus the full-size Qwen3-TTS where pytest_s2st.tiny.qwen_full exists) and prints
each model's parameter count next to the released checkpoint's.
"""
from __future__ import annotations

import argparse
import importlib.util
import logging
import sys
from pathlib import Path
from typing import Callable, TypeVar

from ..defaults import QWEN_YAML
from ..errors import S2STError
from ..tiny import fairseq_full, fairseq_tiny
from ..workload import DEFAULT_WORKLOAD
from .args import OneLineParser, int_in, path_arg, refuse

T = TypeVar("T")
PROG = "s2st-stage"
MAX_SEED = 2**32 - 1  # np.random.seed's range (the builders seed numpy and torch with it)


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(
        prog=PROG,
        description="Build tiny real fairseq models (S2T, MT, TTS, S2S, S2UT + vocoders), a speech npy "
                    "dataset, text datasets and one ready-to-run config per model type into OUT.")
    parser.add_argument("out", type=path_arg, help="output directory (created; existing files are overwritten)")
    parser.add_argument("--seed", type=int_in(0, MAX_SEED), default=None,
                        help=f"seed, 0 to {MAX_SEED} as numpy takes it (default: the embedded default's)")
    parser.add_argument("--no-qwen", action="store_true",
                        help="skip the Qwen3-TTS model even when qwen-tts is installed")
    parser.add_argument("--size", choices=("tiny", "full"), default="tiny",
                        help="tiny (default): small real models for tests; full: the released architectures at "
                             "their released sizes, random weights (~1 GB of fairseq checkpoints, more with Qwen3-TTS)")
    args = parser.parse_args(argv)

    for name in ("hydra", "fairseq", "qwen_tts"):  # their DEBUG/INFO lines while building each model drown the summary
        logging.getLogger(name).setLevel(logging.WARNING)
    if args.size == "full":
        return _stage_full(args)

    def build(seed: int) -> tuple[dict, tuple[Path, Path] | None]:
        result = fairseq_tiny.stage_all(args.out, seed=seed)
        return result, None if args.no_qwen else _stage_qwen(Path(result["out_dir"]))

    staged = _staged(args, fairseq_tiny.SEED, build)
    if staged is None:
        return 2
    (result, qwen), seed = staged
    out = Path(result["out_dir"])
    print(f"staged into {out} (seed {seed})")
    rows = [[name, f"{m['bytes'] / 1024:.1f}", f"{m['build_s']:.2f}", m["sha256"],
             str(Path(m["path"]).relative_to(out))] for name, m in result["models"].items()]
    configs = dict(result["configs"])
    if qwen is not None:
        model_dir, configs["Qwen3TTS"] = qwen
        kib = sum(f.stat().st_size for f in model_dir.rglob("*") if f.is_file()) / 1024
        rows.append(["qwen3tts", f"{kib:.1f}", "", "", f"{model_dir.relative_to(out)} (manifest: model-assets.json)"])
    _print_table(["model", "KiB", "build s", "sha256", "path"], rows)
    _print_files(result["datasets"], configs, out)
    return 0


def _print_table(header: list[str], rows: list[list[str]]) -> None:
    """Columns as wide as their widest cell (names vary in length): text left, numbers right, the last unpadded."""
    table = [header, *rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    numeric = [all(_is_number(r[i]) for r in rows) for i in range(len(header))]
    for r in table:
        cells = [c.rjust(w) if num else c.ljust(w) for c, w, num in zip(r[:-1], widths, numeric)]
        print("  ".join([*cells, r[-1]]))


def _is_number(cell: str) -> bool:
    try:
        float(cell.replace(",", ""))
    except ValueError:
        return cell == ""
    return True


def _print_files(datasets: dict, configs: dict, out: Path) -> None:
    """The staged datasets and configs, one line each, relative to OUT."""
    _print_table(["kind", "name", "path"],
                 [["dataset", name, str(Path(p).relative_to(out))] for name, p in datasets.items()]
                 + [["config", name, str(Path(p).relative_to(out))] for name, p in configs.items()])


def _staged(args: argparse.Namespace, default_seed: int, build: Callable[[int], T]) -> tuple[T, int] | None:
    """(build(seed), seed) with --seed or the builder's default; None once a refusal (OUT is a file, a builder's
    S2STError, an OSError) has been printed as one line on stderr."""
    try:
        if args.out.exists() and not args.out.is_dir():
            raise S2STError(f"{args.out}: exists and is not a directory")
        args.out.mkdir(parents=True, exist_ok=True)  # a parent that is a file: refused before any model is built
        seed = default_seed if args.seed is None else args.seed
        return build(seed), seed
    except S2STError as exc:
        refuse(PROG, exc)
    except OSError as exc:
        refuse(PROG, f"{args.out}: {exc.strerror or exc}")
    return None


def _stage_full(args: argparse.Namespace) -> int:
    staged = _staged(args, fairseq_full.SEED, lambda seed: fairseq_full.stage_full(args.out, seed=seed,
                                                                                  qwen=not args.no_qwen))
    if staged is None:
        return 2
    result, seed = staged
    out = Path(result["out_dir"])
    print(f"staged full-size models into {out} (seed {seed})")
    _print_table(["model", "MiB", "build s", "params", "released", "sha256", "path"],
                 [[name, f"{m['bytes'] / 2**20:.1f}", f"{m['build_s']:.2f}", f"{m['params']:,}",
                   f"{m['released']:,}" if m["released"] else "unpublished", m["sha256"],
                   str(Path(m["path"]).relative_to(out))] for name, m in result["models"].items()])
    _print_files(result["datasets"], result["configs"], out)
    for name, entry in (result["qwen3tts"] or {}).items():
        print(f"qwen3tts {name}: {entry}")
    return 0


def _stage_qwen(out: Path) -> tuple[Path, Path] | None:
    if importlib.util.find_spec("qwen_tts") is None:
        print("qwen-tts not installed: no tiny Qwen3-TTS (in the clone: pip install -e '.[qwen]')")
        return None
    from ..tiny.qwen_tiny import build_tiny_qwen3tts  # lazy: heavy

    model_dir = build_tiny_qwen3tts(out / "qwen3tts")
    config = out / "configs" / "Qwen3TTS.yaml"
    # every path relative to the config's folder, the workload copied beside the other datasets: OUT can be moved,
    # and nothing in it points into the clone
    workload = out / "data" / DEFAULT_WORKLOAD.name
    workload.parent.mkdir(parents=True, exist_ok=True)
    workload.write_bytes(DEFAULT_WORKLOAD.read_bytes())
    config.write_text(QWEN_YAML.format(path="../qwen3tts", workload=f"../data/{workload.name}"))
    return model_dir, config


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
