"""s2st-dataset: what upstream fairseq examples/speech_to_speech/benchmarking/data_utils.py does.

  subsets --data DIR --subset NAME --task TASK   samples of a fairseq subset (batches of one) ->
  subsets --npy IN.npy                           random_/short_/long_dataset{token}w_ids.npy + stats
  random --n N [--feat-dim 80] --out F.npy       a random filterbank-like npy dataset
  stats FILE.npy                                 max/min/avg src_lengths

Differences from upstream, on purpose: the random subset draws without replacement (no
duplicates); --ref-dataset really filters (upstream parses it but never passes it on); samples of a
fairseq dataset without ``ids`` (e.g. translation) get their index as id instead of failing, and
so do samples of an npy without ids (upstream's own random datasets). Files are written in the
upstream format, torch tensors, so upstream get_metrics.py reads them too; reproducibly (same input
-> byte-identical files).
"""
from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from pathlib import Path
from typing import Any, Iterator

from ..errors import S2STError
from ..inputs import show
from ..pipelines.fairseq_runtime import quiet_fairseq
from .args import OneLineParser, int_in, path_arg, refuse

PROG = "s2st-dataset"
SUBSET_NAMES = ("random", "short", "long")
MAX_RANDOM_BYTES = 2**31  # `random`: the float32 features it may hold in memory and write, at the longest T


def subset_file_name(kind: str, token: str = "") -> str:
    """Upstream names: token 'x' -> 'random_dataset_x_w_ids.npy', no token -> 'random_datasetw_ids.npy'."""
    token = f"_{token}_" if token else ""
    return f"{kind}_dataset{token}w_ids.npy"


def stats_line(name: str, samples: list[dict]) -> str:
    from ..dataset_make import dataset_stats  # lazy: heavy

    s = dataset_stats(samples)
    return (f"{name} dataset stats : num_samples={s['n']} max_len = {s['max_len']} "
            f"min_len = {s['min_len']} avg_len = {s['avg_len']}")


# ---------------------------------------------------------------- fairseq subset -> samples


@contextlib.contextmanager
def _quiet_fairseq() -> Iterator[None]:
    """fairseq's import/set-up warnings and INFO chatter (tensorboardX hints) stay off the output."""
    log = logging.getLogger("fairseq")
    level = log.level
    log.setLevel(logging.WARNING)
    try:
        with quiet_fairseq():
            yield
    finally:
        log.setLevel(level)


def _one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"


def load_task_samples(data: str | Path, subset: str, task: str, config_yaml: str | None = None) -> list[dict]:
    """fairseq set-up of ``task`` on ``data``, load_dataset(subset), then one sample per batch of
    one, unshuffled (upstream load_dataset_task): {id, net_input: {src_tokens, src_lengths}}, plus the
    reference translation as ``tgt_text`` where the data holds one (_reference)."""
    data = Path(data)
    if not data.is_dir():
        raise S2STError(f"{data}: --data directory not found")
    with _quiet_fairseq():
        try:
            from fairseq import options, tasks  # lazy: optional
        except ImportError:
            raise S2STError("--data needs fairseq (install the fairseq extra: pip install -e '.[fairseq]' in the "
                            "pytest-s2st clone)") from None
        if task not in tasks.TASK_REGISTRY:
            raise S2STError(f"--task {task!r}: not a fairseq task (e.g. speech_to_text, translation, "
                            f"text_to_speech, speech_to_speech)")
        # upstream's parser: the speech generation parser plus generation args
        parser = options.get_speech_generation_parser()
        options.add_generation_args(parser)
        try:
            args = options.parse_args_and_arch(parser, [str(data), "--task", task, "--cpu"])
        except SystemExit:
            raise S2STError(f"{data}: fairseq cannot parse the arguments of task {task!r}") from None
        if hasattr(args, "config_yaml"):  # speech tasks read DIR/config.yaml
            args.config_yaml = config_yaml or "config.yaml"
            cfg = data / args.config_yaml
            if not cfg.is_file():
                raise S2STError(f"{cfg}: config not found (--config-yaml, relative to --data)")
        elif config_yaml is not None:
            raise S2STError(f"--config-yaml {config_yaml}: task {task!r} takes no config yaml")
        try:
            fs_task = tasks.setup_task(args)
        except Exception as exc:  # fairseq raises bare Exception/FileNotFoundError/KeyError here
            raise S2STError(f"{data}: fairseq cannot set up task {task!r}: {_one_line(exc)}") from None
        try:
            fs_task.load_dataset(subset)
            dataset = fs_task.dataset(subset)
        except Exception as exc:
            raise S2STError(f"{data}: cannot load subset {subset!r} of task {task!r}: {_one_line(exc)}") from None
        if len(dataset) == 0:
            raise S2STError(f"{data}: subset {subset!r} is empty")
        ids = getattr(dataset, "ids", None)
        samples = []
        try:
            batches = fs_task.get_batch_iterator(dataset=dataset, max_sentences=1).next_epoch_itr(shuffle=False)
            for batch in batches:
                index = batch["id"].item()
                net_input = batch["net_input"]
                samples.append({"id": ids[index] if ids is not None else index,
                                "net_input": {"src_tokens": net_input["src_tokens"],
                                              "src_lengths": net_input["src_lengths"]}})
                reference = _reference(dataset, fs_task, task, index, batch)
                if reference is not None:
                    samples[-1]["tgt_text"] = reference
        except Exception as exc:  # unreadable feature files, bad tsv rows
            raise S2STError(f"{data}: cannot read subset {subset!r} sample {len(samples)}: {_one_line(exc)}") from None
    return samples


def _reference(dataset: Any, fs_task: Any, task: str, index: int, batch: dict) -> str | None:
    """The sample's reference translation, kept as ``tgt_text`` for the quality gate (quality/translation.py):
    the manifest's own text (speech_to_text's tgt_text column, before any BPE), else the batch's target tokens
    decoded with the task's target dictionary (translation: the binarised, tokenised target). speech_to_speech
    targets are units, not text: none. One line, like the dataset loader's own refusals."""
    texts = getattr(dataset, "tgt_texts", None)
    if texts is not None and index < len(texts) and isinstance(texts[index], str):
        text = texts[index]
    elif task != "speech_to_speech" and batch.get("target") is not None \
            and getattr(fs_task, "target_dictionary", None) is not None:
        text = fs_task.target_dictionary.string(batch["target"][0])
    else:
        return None
    from ..datasets import reference_problem  # lazy: heavy

    text = " ".join(text.split())
    problem = reference_problem(text)
    if problem:
        raise S2STError(f"sample {index}: reference {problem}")
    return text


# ---------------------------------------------------------------- writing


def _torch_available() -> bool:
    try:
        # lazy: optional
        import torch  # noqa: F401
    except (ImportError, OSError):  # OSError: a torch build that cannot load its libraries
        return False
    return True


def write_dataset(samples: list[dict], path: Path) -> Path:
    """The upstream npy layout with torch tensors, as upstream data_utils writes it: upstream
    get_metrics.py feeds src_tokens to models as they are (numpy arrays fail on .size()). Written
    reproducibly. Without torch: numpy arrays, and a note on stderr that upstream cannot use them."""
    from ..dataset_make import save_npy_dataset  # lazy: heavy

    as_torch = _torch_available()
    try:
        path = save_npy_dataset(samples, path, torch_tensors=as_torch)
    except OSError as exc:
        raise S2STError(f"{path}: cannot write dataset: {exc.strerror or exc}") from None
    if not as_torch:
        print(f"{PROG}: note: torch is not installed: {path} holds numpy arrays, which upstream "
              "get_metrics.py cannot feed to its models", file=sys.stderr)
    return path


def _plain_id(x: Any) -> Any:
    """A 0-d array/tensor id as a Python scalar, so it compares and hashes like one."""
    if hasattr(x, "item") and getattr(x, "ndim", None) == 0:
        return x.item()
    return x


def write_subsets(samples: list[dict], out: Path, *, n: int = 500, seed: int = 1, token: str = "",
                  ref: Path | None = None, name: str = "input") -> dict[str, Path]:
    """random_/short_/long_ subsets of ``samples`` (after the --ref-dataset id filter) into ``out``;
    prints the stats of the filtered input and of each subset. Returns {kind: path}."""
    from ..dataset_make import id_matches, make_subsets  # lazy: heavy
    from ..datasets import load_npy_dataset  # lazy: heavy

    if ref is not None:
        ref_ids = {_plain_id(s["id"]) for s in load_npy_dataset(ref)}
        samples = [s for s in samples if id_matches(_plain_id(s["id"]), ref_ids)]
        if not samples:
            raise S2STError(f"{ref}: none of its {len(ref_ids)} ids matches a sample of {name}")
    print(stats_line(name, samples))
    subsets = make_subsets(samples, n=n, seed=seed)
    if out.exists() and not out.is_dir():
        raise S2STError(f"{out}: --out exists and is not a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise S2STError(f"{out}: cannot create --out directory: {exc.strerror or exc}") from None
    written = {}
    for kind in SUBSET_NAMES:
        path = write_dataset(subsets[kind], out / subset_file_name(kind, token))
        written[kind] = path
        print(f"{stats_line(kind, subsets[kind])} -> {path}")
    return written


# ---------------------------------------------------------------- commands


def _cmd_subsets(a: argparse.Namespace) -> None:
    if a.npy is not None:
        if a.subset or a.task or a.config_yaml:
            raise S2STError("--subset/--task/--config-yaml go with --data, not with --npy")
        from ..datasets import load_npy_dataset  # lazy: heavy

        samples, name = load_npy_dataset(a.npy), str(a.npy)
    else:
        missing = [opt for opt, v in (("--subset", a.subset), ("--task", a.task)) if not v]
        if missing:
            raise S2STError(f"--data {a.data} needs {' and '.join(missing)}")
        samples, name = load_task_samples(a.data, a.subset, a.task, a.config_yaml), a.subset
    write_subsets(samples, a.out, n=a.n, seed=a.seed, token=a.dataset_save_token, ref=a.ref_dataset, name=name)


def _cmd_random(a: argparse.Namespace) -> None:
    from ..dataset_make import generate_random_dataset  # lazy: heavy

    if a.max_len < a.min_len:
        raise S2STError(f"--max-len {a.max_len} is below --min-len {a.min_len}")
    if a.n * a.max_len * a.feat_dim * 4 > MAX_RANDOM_BYTES:
        raise S2STError(f"--n {a.n} x --max-len {a.max_len} x --feat-dim {a.feat_dim} float32: up to "
                        f"{a.n * a.max_len * a.feat_dim * 4:,} bytes, over the {MAX_RANDOM_BYTES:,} this command "
                        "writes")
    if a.out.exists() and a.out.is_dir():
        raise S2STError(f"{a.out}: --out is a directory, expected a .npy file path")
    if not a.out.parent.is_dir():
        raise S2STError(f"{a.out.parent}: directory of --out not found")
    samples = generate_random_dataset(a.n, a.feat_dim, a.min_len, a.max_len, a.seed)
    path = write_dataset(samples, a.out)
    print(f"{stats_line('random', samples)} feat_dim = {a.feat_dim} -> {path}")


def _cmd_stats(a: argparse.Namespace) -> None:
    from ..datasets import load_npy_dataset  # lazy: heavy

    print(stats_line(str(a.file), load_npy_dataset(a.file)))


def _token(value: str) -> str:
    """--dataset-save-token: part of a file name inside --out, so no separator, no NUL, nothing non-printable."""
    if any(c in value for c in "/\\") or not value.isprintable() or len(value) > 100:
        raise argparse.ArgumentTypeError(f"'{show(value, 80)}': the token goes into a file name inside --out: "
                                         "printable, no / or \\, at most 100 characters")
    return value


def make_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog=PROG, description="Benchmark npy datasets as upstream fairseq "
                                                  "benchmarking/data_utils.py makes them: random/short/long subsets, "
                                                  "random data, stats.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="{subsets,random,stats}")

    p = sub.add_parser("subsets", help="write random_/short_/long_ subsets of a fairseq subset or an npy dataset")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--data", type=path_arg, help="fairseq data dir (with config.yaml and dict for speech tasks)")
    src.add_argument("--npy", type=path_arg, help="existing npy dataset to take the subsets from")
    p.add_argument("--subset", help="fairseq subset to load, e.g. test (with --data)")
    p.add_argument("--task", help="fairseq task, e.g. speech_to_text (with --data)")
    p.add_argument("--config-yaml", default=None, help="config yaml relative to --data (default config.yaml)")
    p.add_argument("--n", type=int_in(1), default=500, help="samples per subset (default 500)")
    p.add_argument("--seed", type=int, default=1, help="seed of the random subset (default 1)")
    p.add_argument("--dataset-save-token", type=_token, default="",
                   help="TOKEN in the file names: random_dataset_TOKEN_w_ids.npy")
    p.add_argument("--ref-dataset", type=path_arg, help="npy dataset: keep only the samples whose id is in it")
    p.add_argument("--out", type=path_arg, required=True, help="directory the three subsets are written to")
    p.set_defaults(run=_cmd_subsets)

    p = sub.add_parser("random", help="generate a random npy dataset (src_tokens 1 x T x feat-dim)")
    p.add_argument("--n", type=int_in(1), required=True, help="number of samples")
    p.add_argument("--feat-dim", type=int_in(1), default=80, help="feature dim D (default 80)")
    p.add_argument("--min-len", type=int_in(1), default=50, help="shortest T (default 50)")
    p.add_argument("--max-len", type=int_in(1), default=200, help="longest T (default 200)")
    p.add_argument("--seed", type=int_in(0), default=1, help="seed, 0 or more (default 1)")
    p.add_argument("--out", type=path_arg, required=True, help="output .npy file")
    p.set_defaults(run=_cmd_random)

    p = sub.add_parser("stats", help="print max/min/avg src_lengths of an npy dataset")
    p.add_argument("file", type=path_arg, help="npy dataset")
    p.set_defaults(run=_cmd_stats)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        args = make_parser().parse_args(argv)
    except SystemExit as exc:  # usage errors (one line, code 2) and --help (code 0)
        return exc.code if isinstance(exc.code, int) else 2
    try:
        args.run(args)
    except S2STError as exc:
        return refuse(PROG, exc)
    except OSError as exc:
        return refuse(PROG, f"{getattr(exc, 'filename', None) or ''}: {exc.strerror or exc}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
