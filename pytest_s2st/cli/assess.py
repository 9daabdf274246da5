"""s2st-assess: judge a candidate run dir against a baseline run dir under a frozen policy.

    s2st-assess --baseline DIR --candidate DIR [--quality scores.json | --score [--anchors DIR]
                [--asr-model-dir DIR] [--write-scores PATH]] [--policy policy.json|yaml] [--json PATH]

Exit codes (the seed's): 0 PASS, 1 FAIL, 2 INCONCLUSIVE. A bad input file (unreadable policy,
malformed scores, corrupt requests.jsonl) is missing evidence too: one line on stderr, exit 2.
An argument error (a missing value, a bad option) is one line on stderr, also exit 2.
Without --policy, the policy saved with the baseline run (summary.json "policy") is used.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from ..errors import S2STError
from ..inputs import dumps
from .args import OneLineParser, one_line, path_arg
from ..quality.policy import Policy
from ..quality.scorefile import load_scores
from ..quality.verdict import EXIT_CODES, INCONCLUSIVE, assess


def build_parser() -> OneLineParser:
    p = OneLineParser(prog="s2st-assess", description="Offline PASS / FAIL / INCONCLUSIVE verdict (exit 0 / 1 / 2).")
    p.add_argument("--print-scorer-id", action="store_true",
                   help="print the offline scorer's frozen id and identity (packages, model hashes) and exit; "
                        "freeze it in the policy before measuring")
    p.add_argument("--baseline", type=path_arg, help="baseline run dir (requests.jsonl, wav/, summary.json)")
    p.add_argument("--candidate", type=path_arg, help="candidate run dir")
    p.add_argument("--policy", type=path_arg,
                   help="frozen policy, JSON or YAML (default: the one saved with the baseline run)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--quality", type=path_arg, help="independent scores JSON (scorer_id, baseline[], candidate[])")
    src.add_argument("--score", action="store_true", help="score both runs here with the offline scorers")
    p.add_argument("--anchors", type=path_arg, help="with --score: dir of <voice>.wav anchor recordings")
    p.add_argument("--asr-model-dir", type=path_arg, help="with --score: local Whisper-style model dir for zh")
    p.add_argument("--write-scores", type=path_arg, help="with --score: save the scores JSON here")
    p.add_argument("--json", type=path_arg, help="also write the verdict as JSON here")
    return p


def _write(option: str, path: Path, write) -> None:
    """Write an output file; an OS error (a missing folder, a directory, no permission) as the option's one line."""
    try:
        write(path)
    except OSError as exc:
        raise S2STError(f"{option} {path}: {exc.strerror or exc}") from None


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.print_scorer_id:
        from ..quality.scorers import get_scorer  # lazy: heavy

        scorer = get_scorer(args.anchors, args.asr_model_dir)
        print(scorer.scorer_id)
        print(json.dumps(scorer.identity(), indent=2, sort_keys=True))
        return 0
    if not args.baseline or not args.candidate:
        parser.error("--baseline and --candidate are required")
    try:
        policy = Policy.load(args.policy) if args.policy else None
        scores = load_scores(args.quality) if args.quality else None
        if args.score:
            from ..quality.scorers import get_scorer  # lazy: heavy

            scores = get_scorer(args.anchors, args.asr_model_dir).score_runs(args.baseline, args.candidate)
            if args.write_scores:
                _write("--write-scores", args.write_scores, scores.write)
        verdict = assess(args.baseline, args.candidate, policy, scores)
    except S2STError as exc:
        print(f"s2st-assess: {one_line(exc)}", file=sys.stderr)
        return EXIT_CODES[INCONCLUSIVE]
    print(verdict.format())
    if args.json:
        text = dumps(verdict.to_dict(), indent=2, ensure_ascii=False) + "\n"
        try:
            _write("--json", args.json, lambda path: path.write_text(text, encoding="utf-8"))
        except S2STError as exc:  # the verdict is printed above; the file asked for is missing: exit 2
            print(f"s2st-assess: {one_line(exc)}", file=sys.stderr)
            return EXIT_CODES[INCONCLUSIVE]
    return verdict.exit_code


if __name__ == "__main__":
    sys.exit(main())
