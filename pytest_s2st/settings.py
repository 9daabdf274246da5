"""Every pytest-s2st setting in one table: command-line flag, ini twin, config key, parser, default.

Precedence (highest first): an explicit command-line flag, the config's ``general`` section,
the ini value (``[tool.pytest.ini_options]``), the built-in default. Parsers raise ValueError
with a message that names the expected form; callers add where the value came from.
"""
from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from typing import Any, Callable

from .errors import S2STError
from .inputs import show
from .measure.device import CHOICES_TEXT as DEVICE_CHOICES, parse_device
from .metrics import BY_NAME as METRICS, COMPARABLE as COMPARE_METRICS, HIGHER, LOWER  # the metric table
from .quality.scored import score_fields
from .runtime_stats import RUNTIME_STATISTIC


def positive_int(value: Any) -> int:
    try:
        out = int(str(value).strip())
    except ValueError:
        raise ValueError(f"must be an integer > 0, got {value!r}") from None
    if out <= 0 or isinstance(value, float) and value != out:
        raise ValueError(f"must be an integer > 0, got {value!r}")
    return out


def non_negative_int(value: Any) -> int:
    try:
        out = int(str(value).strip())
    except ValueError:
        raise ValueError(f"must be an integer >= 0, got {value!r}") from None
    if out < 0:
        raise ValueError(f"must be an integer >= 0, got {value!r}")
    return out


def positive_float(value: Any) -> float:
    try:
        out = float(str(value).strip())
    except ValueError:
        raise ValueError(f"must be a number > 0, got {value!r}") from None
    if not 0 < out < float("inf"):  # nan and inf are not durations
        raise ValueError(f"must be a number > 0, got {value!r}")
    return out


MAX_PROCESSES = 64     # --s2st-processes: fresh processes per side (each one a pytest worker)
MAX_ROUNDS = 100_000  # timed rounds one benchmark may ask for: each is kept (rounds_s) in the saved JSON
MAX_SECONDS = 7 * 86400.0  # any duration option: a week (1e308 is well-formed but no bound at all)
MAX_ROUND_S = 60.0     # --s2st-ab-round-s: one A/B round
# an A/B round, in one process and across code versions: this machine slows every ~0.44 s for 0.1-0.2 s; with
# rounds of 0.1 s that rhythm falls on the same side of the ABBA cycle (0.4 s) for many pairs, and 80 pairs in one
# process read +10 % anywhere in x1.08-1.16 idle; with 0.025 s rounds (320 pairs, the same time) x1.097-1.103
# (docs/records/measurement.md)
AB_ROUND_S = 0.025
MAX_AUDIO_S = 86400.0  # audio one service response may carry (a day): the byte bounds derive from it


def bounded_int(upper: int) -> Callable[[Any], int]:
    def parse(value: Any) -> int:
        out = positive_int(value)
        if out > upper:
            raise ValueError(f"must be an integer in 1-{upper}, got {value!r}")
        return out

    parse.__name__ = "bounded_int"
    return parse


def bounded_float(upper: float, *, below: bool = False) -> Callable[[Any], float]:
    """A number in (0, upper] (``below``: (0, upper)); NaN, inf and absurd magnitudes refused."""
    def parse(value: Any) -> float:
        out = positive_float(value)
        if out > upper or below and out >= upper:
            raise ValueError(f"must be a number > 0 and {'<' if below else '<='} {upper:g}, got {value!r}")
        return out

    parse.__name__ = "bounded_float"
    return parse


def int_list(value: Any) -> tuple[int, ...]:
    """'1,4,8' or [1, 4, 8] -> (1, 4, 8): each a positive integer, no duplicates."""
    items = value if isinstance(value, (list, tuple)) else str(value).split(",")
    try:
        out = tuple(positive_int(v) for v in items if str(v).strip())
    except ValueError:
        raise ValueError(f"must be positive integers separated by commas (e.g. 1,4,8), got {value!r}") from None
    if not out or len(set(out)) != len(out):
        raise ValueError(f"must be distinct positive integers separated by commas (e.g. 1,4,8), got {value!r}")
    return out


def choice(*allowed: str) -> Callable[[Any], str]:
    def parse(value: Any) -> str:
        text = str(value).strip()
        if text not in allowed:
            raise ValueError(f"must be one of {', '.join(allowed)}, got {value!r}")
        return text

    parse.__name__ = "choice"
    return parse


def text(value: Any) -> str:
    out = str(value).strip()
    if not out:
        raise ValueError("must not be empty")
    return out


def path(value: Any) -> str:
    """A file or folder name: text without a NUL or a line break (the OS refuses the first; the
    second would split every line that echoes the path). A config's null, boolean, list or mapping is no path:
    str() of it would name a folder "None" or "{'extra_body': None}" (and dump_dir creates it)."""
    if value is None or isinstance(value, (bool, dict, list)):
        raise ValueError(f"must be a path (text), got {'null' if value is None else type(value).__name__}")
    out = text(value)
    if any(c in out for c in "\x00\n\r"):
        raise ValueError(f"must be a path without NUL or line breaks, got '{show(out)}'")
    return out


def history_url(value: Any) -> str:
    """Where the results history lives: a path or a URL of a registered store (``history.store.STORES``:
    sqlite:///PATH, postgresql://...); opened, and so checked further, at the session's end."""
    from .history.store import forms, store_kind  # lazy: plugin load

    out = path(value)
    if store_kind(out) is None:
        raise ValueError(f"must be {forms('a path')}, got '{show(out)}'")
    return out


HISTORY_TESTS = ("t", "z", "percent")


def history_limits(value: Any) -> tuple[tuple[str, str, float], ...]:
    """'runtime_s,bleu:percent:0.02' -> (('runtime_s', 't', 0.999), ('bleu', 'percent', 0.02))."""
    out = []
    for item in (value if isinstance(value, (list, tuple)) else str(value).split(",")):
        # an item parsed before comes back from a case's JSON as [metric, test, boundary]
        parts = [str(p).strip() for p in (item if isinstance(item, (list, tuple)) else str(item).split(":"))]
        if not parts[0] and len(parts) == 1:
            continue
        metric, test = parts[0], parts[1] if len(parts) > 1 else "t"
        if metric not in METRICS:
            raise ValueError(f"'{show(metric)}' is not a metric (one of {', '.join(METRICS)})")
        if METRICS[metric].better not in (LOWER, HIGHER):
            raise ValueError(f"'{show(metric)}': neither a higher nor a lower value is worse, so no threshold can fire")
        if test not in HISTORY_TESTS or len(parts) > 3:
            raise ValueError(f"'{show(item)}': expected METRIC[:TEST[:BOUNDARY]] with TEST one of "
                             f"{', '.join(HISTORY_TESTS)}")
        default = 0.05 if test == "percent" else 0.999
        try:
            boundary = float(parts[2]) if len(parts) > 2 else default
        except ValueError:
            boundary = float("nan")
        if not (0 < boundary < 1 and (test == "percent" or boundary > 0.5)):
            raise ValueError(f"'{show(item)}': the boundary must be a quantile in (0.5, 1) for t and z, a fraction "
                             "in (0, 1) for percent (0.05 = 5 %)")
        out.append((metric, test, boundary))
    if not out:
        raise ValueError(f"must name at least one metric, got {value!r}")
    return tuple(out)


def extra_body(value: Any) -> dict:
    """A JSON object (text, or a mapping from the config), merged into every openai-protocol request."""
    from .service.openai_api import parse_extra_body  # lazy: plugin load

    return parse_extra_body(value)


def sample_rate(value: Any) -> int:
    from .service.openai_api import MAX_RATE  # lazy: plugin load

    out = positive_int(value)
    if out > MAX_RATE:
        raise ValueError(f"must be a sample rate in Hz, 1-{MAX_RATE}, got {value!r}")
    return out


def request_rate(value: Any) -> Any:
    """Requests per second > 0, the string "inf" (JSON has no infinity), or a registered arrival process
    NAME:K=V,... as its object (service/arrivals.py: ARRIVALS)."""
    from .service.arrivals import parse_request_rate  # lazy: heavy

    return parse_request_rate(value)


def burstiness(value: Any) -> float | str:
    """A gamma shape > 0, or the string "inf" (evenly spaced arrivals)."""
    from .service.arrivals import parse_burstiness  # lazy: heavy

    out = parse_burstiness(value)
    return "inf" if out == float("inf") else out


def endpoint(value: Any) -> str:
    """A speech endpoint in its one spelling (a base URL gets the protocol's default path)."""
    from .runs import normalize_endpoint  # lazy: plugin load

    try:
        return normalize_endpoint(text(value))
    except S2STError as exc:
        raise ValueError(str(exc)) from None


def bleu_tokenize(value: Any) -> str:
    """auto, or a sacrebleu tokenizer name whose modules are installed (quality/translation.py)."""
    from .quality.translation import parse_tokenize  # lazy: plugin load

    return parse_tokenize(value)


def device_name(value: Any) -> str:
    """auto or a backend of measure.device.BACKENDS, with :N where it takes one (one device of several)."""
    try:
        parse_device(value)
    except ValueError:
        raise ValueError(f"must be one of {DEVICE_CHOICES}, got {value!r}") from None
    return str(value).strip().lower()


def shard_spec(value: Any) -> tuple[int, int]:
    """'2/3' -> (2, 3): shard 2 of 3 (see distribute.shard_partition)."""
    from .distribute import parse_shard  # lazy: plugin load

    return parse_shard(value)


def boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    lowered = str(value).strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"must be true or false, got {value!r}")




from .limits import CompareLimit, compare_limits  # noqa: E402,F401 -- the limit grammar (limits.py)


@dataclass(frozen=True)
class Setting:
    name: str            # attribute / ini suffix / config key
    parse: Callable[[Any], Any]
    default: Any
    help: str
    per_case: bool = True  # may the config's general section set it?
    metavar: str | None = None

    @property
    def flag(self) -> str:
        return "--s2st-" + self.name.replace("_", "-")

    @property
    def ini(self) -> str:
        return "s2st_" + self.name

    @property
    def dest(self) -> str:
        return "s2st_" + self.name

    @property
    def default_text(self) -> str:
        """' (default: 600)' for --help, as the value is spelled; '' when the help already says what happens
        unset, when there is no default (None: the help says what unset means), or for an on/off flag."""
        if self.default is None or self.default is False or "default" in self.help:
            return ""
        value = self.default
        if isinstance(value, (tuple, list)):
            value = ",".join(str(v) for v in value)
        elif isinstance(value, float):
            value = f"{value:g}"
        return f" (default: {value})"

    @property
    def ini_help(self) -> str:
        """The ini option's sentence in --help: what it sets (as its command-line flag) and what wins over it."""
        over = f"{self.flag} and a config's general.{self.name}" if self.per_case else self.flag
        return f"{self.help}{self.default_text}; {over} override it" if self.per_case else \
            f"{self.help}{self.default_text}; {over} overrides it"


SETTINGS: tuple[Setting, ...] = (
    Setting("model_type", text, None, "override the config's model_type (S2T, MT, TTS, S2S, S2UT, 2StageS2ST, "
            "3StageS2ST, callable, ...); default: the config's", metavar="TYPE"),
    Setting("dataset_path", path, None, "dataset file: npy in the fairseq benchmark format, or a raw tsv manifest "
            "(default: the config's)", metavar="PATH"),
    Setting("dataset_type", choice("npy", "raw", "text"), "npy", "dataset format: npy, raw (tsv manifest of audio "
            "files) or text (jsonl of {id, text, language, voice, seed})"),
    Setting("dataset_size", non_negative_int, None, "use only the first N samples (0: all, as upstream; default: the "
            "config's, else all)", metavar="N"),
    Setting("repeat", bounded_int(MAX_ROUNDS), 1, f"timed runs per sample (runtime is their {RUNTIME_STATISTIC})",
            metavar="N"),
    Setting("warmup", non_negative_int, 2, "untimed warm-up runs of each stage on the first sample", metavar="N"),
    Setting("device", device_name, "cpu", f"device to run on: {DEVICE_CHOICES}; :N pins one, under xdist worker gwK "
            "takes K mod the count"),
    Setting("threads", positive_int, 1, "torch intra-op threads while measuring", metavar="N"),
    Setting("memory", choice("vmhwm", "memory_profiler", "off"), "vmhwm", "peak-memory method: vmhwm (reset via "
            "/proc/self/clear_refs), memory_profiler, off"),
    Setting("flops", choice("torch", "torch-strict", "papi", "off"), "torch", "FLOP counter: torch (dispatch-level; a "
            "count that left matmul-class ops uncounted is shown partial), torch-strict (such a count is n/a), papi "
            "(hardware counters), off"),
    Setting("tensor_memory", choice("dispatch", "off"), "dispatch", "tensor-memory metric (tensor_peak_mib): dispatch "
            "(live torch storages, counted in the same dispatch pass as --s2st-flops=torch) or off"),
    Setting("min_rounds", bounded_int(MAX_ROUNDS), None, "timed rounds at least: the dataset is cycled until N rounds "
            "ran (default: 5 or samples x repeat, whichever is more; under --s2st-runtime-protocol upstream: samples x "
            "repeat)", metavar="N"),
    Setting("runtime_protocol", choice("warm", "upstream"), "warm", "how runtime is timed: warm (every stage called on "
            "each distinct input shape before the timed rounds) or upstream (fairseq get_metrics.py exactly: warm-up "
            "on sample 0 only, each new input shape of the last stage timed cold; for parity runs)"),
    Setting("target_precision", bounded_float(1.0, below=True), None, "add timed rounds until the 95% CI half-width "
            f"of the {RUNTIME_STATISTIC} round time is at most this fraction of it (e.g. 0.02), within --s2st-max-time "
            "(default: off, a fixed number of rounds)", metavar="FRACTION"),
    Setting("max_time", bounded_float(MAX_SECONDS), 60.0, "seconds of timed rounds --s2st-target-precision may spend",
            metavar="S"),
    Setting("isolate", boolean, False, "measure each case's peak memory in a fresh process (its imports and model "
            "only, as upstream's one process per config), so it does not depend on the cases that ran before it; cpu "
            "only"),
    Setting("instructions", choice("off", "callgrind"), "off", "count the CPU instructions of each stage's forward on "
            "the first sample under valgrind's callgrind (deterministic, for CI gates; slow: a child process runs the "
            "model under valgrind): off or callgrind"),
    Setting("bleu_tokenize", bleu_tokenize, "auto", "sacrebleu tokenizer of BLEU and ASR-BLEU: auto (by the target "
            "language, as sacrebleu picks for its test sets: zh -> zh, ja -> ja-mecab, ko -> ko-mecab, else 13a; "
            "refused when its modules are not installed) or any sacrebleu tokenizer (13a, intl, char, zh, ja-mecab, "
            "ko-mecab, flores200, ...); it is in the score's signature", metavar="NAME"),
    Setting("dump_dir", path, None, "write every speech output as {prefix}_{i}_pred.wav under DIR/<case id> (default: "
            "not written)", metavar="DIR"),
    Setting("ab_round_s", bounded_float(MAX_ROUND_S), AB_ROUND_S, "an A/B (baseline=, --s2st-ab-base) runs this many "
            "seconds of calls a round, both sides the same calls (calibrated on the slower side): a preemption on a "
            "busy machine then takes its share of a round rather than adding the same delay to both sides (default: "
            f"{AB_ROUND_S:g})", metavar="S"),
    Setting("ab_base", text, None, "time every s2st benchmark of this git revision (a pull request's base: "
            "origin/main, a tag, a sha) against this checkout's, in warm worker processes taking turns round by round, "
            "each importing its own tree; the verdict is the test's, --s2st-compare-fail judges it (default: off)",
            per_case=False, metavar="REF"),
    Setting("ab_pairs", bounded_int(MAX_PROCESSES // 2), 1, "--s2st-ab-base: pairs of worker processes (one per side "
            "each), their rounds interleaved; with 2 or more the interval is widened to hold each pair's own median "
            "(a process's memory layout moves all its rounds alike)",
            per_case=False, metavar="N"),
    Setting("ab_estimator", text, "median", "what judges an A/B's paired round ratios (baseline=, --s2st-ab-base) into "
            "its ratio, 95% interval and word: a name of pytest_s2st.ab.ESTIMATORS (median: the median of the ABBA "
            "pair ratios and its order-statistic interval; a conftest or plugin may register more); a test's "
            "s2st_benchmark(..., baseline=, ab_estimator=NAME) chooses its own", per_case=False, metavar="NAME"),
    Setting("summary", path, None, "write the A/B tables (baseline=, --s2st-ab-base) as GitHub-flavoured markdown to "
            "FILE, for a pull-request comment (FILE.json: the rows as JSON, each with every round); under GitHub "
            "Actions they are also appended to $GITHUB_STEP_SUMMARY (default: not written)",
            per_case=False, metavar="FILE"),
    Setting("compare_fail", compare_limits, None, "fail when a metric regresses past a limit: an in-process A/B "
            "(s2st_benchmark(..., baseline=)) fails its test, a row compared with --benchmark-compare fails the "
            "session; e.g. peak_delta_mib:10%,flops:1%,runtime_s:5% (default: no limit)",
            per_case=False, metavar="LIMITS"),
    Setting("strict", boolean, False, "treat INCONCLUSIVE (missing evidence) as failure", per_case=False),
    Setting("processes", bounded_int(MAX_PROCESSES), None, "time every benchmark in N fresh processes (xdist workers, "
            "--dist each, one benchmark timed at a time) and save or compare them as one side of N runs, as s2st-merge "
            "--repeats folds them: N >= 3 gives a between-run verdict (default: one process)",
            per_case=False, metavar="N"),
    # service benchmarks (s2st_service / s2st_load)
    Setting("concurrency", int_list, (1,), "concurrency levels of service benchmarks, e.g. 1,4,8 (ids [<case>-c1] ...)",
            metavar="LIST"),
    Setting("endpoint", endpoint, None, "benchmark this external server (http://host:port) instead of starting the "
            "reference server (default: the reference server)", per_case=False, metavar="URL"),
    Setting("workload", path, None, "service workload jsonl ({id, text, language, voice, seed}); default: the shipped "
            "12 sentences", metavar="PATH"),
    Setting("requests", positive_int, None, "measured requests per concurrency level (default: one pass over the "
            "workload)", metavar="N"),
    Setting("max_audio_s", bounded_float(MAX_AUDIO_S), 600.0, "seconds of audio one service response may carry; past "
            "it (and the byte, line, chunk and event bounds derived from it) the request is recorded as an error",
            metavar="S"),
    Setting("request_timeout", bounded_float(MAX_SECONDS), 60.0, "seconds one service request may take (a stall past "
            "it is recorded as an error)", metavar="S"),
    Setting("protocol", choice("s2st", "openai"), "s2st", "the speech server's protocol: s2st (this project's SSE "
            "events) or openai (OpenAI's POST /v1/audio/speech, as vLLM-Omni serves it: raw PCM, SSE "
            "speech.audio.delta events or WAV)"),
    Setting("extra_body", extra_body, None, "protocol openai: a JSON object merged into every request body (as vllm "
            "bench serve --extra-body), e.g. '{\"model\": \"m\", \"task_type\": \"CustomVoice\"}'", metavar="JSON"),
    Setting("sample_rate", sample_rate, 24000, "protocol openai: the sample rate (Hz) of raw int16 PCM answers that do "
            "not name theirs", metavar="HZ"),
    Setting("request_rate", request_rate, "inf", "open-loop load: measured requests per second with gamma/Poisson "
            "arrivals (inf = closed loop), or NAME:K=V,... of a registered arrival process; the concurrency cap still "
            "applies", metavar="R"),
    Setting("burstiness", burstiness, 1.0, "open-loop load: the gamma shape of inter-arrival times (1 = Poisson; <1 "
            "burstier; inf = evenly spaced)", metavar="B"),
    Setting("evidence_dir", path, ".s2st-runs", "where service runs keep requests.jsonl and every WAV: "
            "DIR/<session>/<case>/c<N>", per_case=False, metavar="DIR"),
    Setting("baseline", path, None, "quality gate: an earlier evidence root (DIR/<case>/c<N>) to judge candidates "
            "against (default: no gate)", per_case=False, metavar="DIR"),
    Setting("quality", path, None, "quality gate: bring your own scores (JSON: scorer_id, baseline and candidate "
            "lists of "
            f"{{id, pcm_sha256, {', '.join(score_fields())}}}; default: none)", per_case=False, metavar="FILE"),
    Setting("plot", path, None, "write a PNG per case into DIR (relative: under the rootdir): time to first audio, "
            "real-time factor, error rate, throughput, playback underrun and inter-chunk gap against concurrency, one "
            "line per test, a served baseline overlaid dashed (default: no plot)", per_case=False, metavar="DIR"),
    Setting("level_parts", positive_int, 1, "drive each service concurrency level as N parts of c/N on N xdist "
            "workers, started together; one level summary from their merged records (1 = one client process)",
            per_case=False, metavar="N"),
    Setting("level_parts_wait", bounded_float(MAX_SECONDS), 600.0, "seconds a level part waits for its sibling parts "
            "to arrive (and the first part for all to finish) before the level is INCONCLUSIVE",
            per_case=False, metavar="S"),
    Setting("history", history_url, None, "append this session's rows (every metric with its interval, per stage and "
            "service level, the A/B and gate verdicts) to a results database: a path (e.g. "
            ".benchmarks/s2st-history.sqlite), sqlite:///PATH or postgresql://USER@HOST/DB; see it with s2st-history "
            "site (default: not kept)", per_case=False, metavar="URL"),
    Setting("history_fail", history_limits, None, "fail the session when a metric's new value is past a statistical "
            "threshold over its history (same branch and machine, --s2st-history-window runs): "
            "METRIC[:TEST[:BOUNDARY]],... with TEST t (default), z or percent; BOUNDARY a quantile for t/z (default "
            "0.999) or a fraction for percent (e.g. runtime_s:percent:0.05); only the metric's bad direction fires",
            per_case=False, metavar="LIMITS"),
    Setting("history_window", bounded_int(10_000), 30, "--s2st-history-fail: runs of history a new value is judged "
            "against", per_case=False, metavar="N"),
    Setting("shard", shard_spec, None, "run only slice I of N of the cases (CI shards; join their saved JSONs with "
            "s2st-merge; default: all cases)", per_case=False, metavar="I/N"),
)

BY_NAME = {s.name: s for s in SETTINGS}


def argparse_type(setting: Setting) -> Callable[[str], Any]:
    """Wrap a parser so argparse reports a bad value as a usage error with our message."""

    def convert(value: str) -> Any:
        try:
            return setting.parse(value)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = setting.name
    return convert
