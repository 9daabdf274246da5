"""Fuzzing the console scripts' argument parsing (hypothesis), in process: s2st-serve, s2st-stage, s2st-dataset,
s2st-merge and s2st-assess.

Each example is a usable command line with ONE bad value put in (a NUL, a number out of range, huge or negative,
empty text, unicode digits and line breaks, a path that is a file, a directory, missing, or reaches outside --out,
an unknown choice or option). Every one must end with exit code 2 and ONE line on stderr that names the option
(or the path), never a traceback, and never get as far as the work: the server's bind, a model build, data
generation and the dataset writer are tripwires here. ``main(argv)`` runs in this process; no process is spawned
and no server started. Examples run per test are counted and printed (pytest -s).
"""
from __future__ import annotations

import collections
import contextlib
import io
import ipaddress
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from pytest_s2st.cli import assess, dataset, merge, serve, stage
from pytest_s2st.inputs import show

COUNTS: collections.Counter = collections.Counter()
FUZZ = settings(max_examples=150, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
S = "{S}"  # the scratch directory, filled in by the test (examples are written before it exists)


class Reached(BaseException):
    """The script got past its checks: a server would bind, a model build or the data writing would start."""


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    from pytest_s2st.dataset_make import generate_random_dataset, save_npy_dataset

    d = tmp_path_factory.mktemp("cli")
    (d / "file").write_text("x")
    (d / "dir").mkdir()
    save_npy_dataset(generate_random_dataset(2, 4, 3, 5), d / "r.npy", torch_tensors=False)
    return d


@pytest.fixture(scope="module", autouse=True)
def tripwires(scratch):
    def trip(*args, **kwargs):
        raise Reached(f"reached the work with {args!r:.200}")

    mp = pytest.MonkeyPatch()
    for target in ("pytest_s2st.service.server.run_server", "pytest_s2st.pipelines.base.build_pipeline",
                   "pytest_s2st.tiny.fairseq_tiny.stage_all", "pytest_s2st.tiny.fairseq_full.stage_full",
                   "pytest_s2st.dataset_make.generate_random_dataset", "pytest_s2st.cli.dataset.write_dataset"):
        mp.setattr(target, trip)
    yield
    mp.undo()
    print("\nhypothesis examples run: " + ", ".join(f"{k}={v}" for k, v in sorted(COUNTS.items())))


def run(main, argv: list[str]) -> tuple[object, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse's usage errors
            code = exc.code
    return code, err.getvalue()


def refused(main, argv: list[str], scratch: Path, *names: str) -> str:
    """Run with {S} filled in; exit code 2 and one line on stderr naming one of ``names`` (escaped as shown)."""
    argv = [a.replace(S, str(scratch)) for a in argv]
    code, err = run(main, argv)
    assert "Traceback" not in err
    assert code == 2, (argv, code, err)
    lines = err.splitlines()  # every line break str knows (\r, \v, \x1c, \u2028 ...)
    assert len(lines) == 1 and err.endswith("\n"), (argv, err)
    wanted = [n.replace(S, str(scratch)) for n in names]
    assert any(show(n, 2000) in lines[0] for n in wanted), (wanted, lines[0])
    return lines[0]


# --- bad values (each strategy draws only values the option must refuse) -------------------------------------

def _int_ok(text: str, low: int, high: int | None) -> bool:
    try:
        n = int(text)  # takes " 7", "1_0" and other scripts' digits ("٣"): in range, they are good values
    except ValueError:
        return False
    return n >= low and (high is None or n <= high)


def bad_ints(low: int, high: int | None = None) -> st.SearchStrategy[str]:
    out_of_range = st.integers(max_value=low - 1) | st.sampled_from([low - 1, -(10**30), -(2**63)])
    if high is not None:
        out_of_range |= st.integers(min_value=high + 1) | st.sampled_from([high + 1, 10**30, 2**64])
    weird = st.sampled_from(["", " ", "\0", "1\0", "nan", "inf", "1e3", "0x10", "1.0", "²", "--", "-x", "7\n8",
                             "9" * 5000])
    return (out_of_range.map(str) | weird | st.text(max_size=12)).filter(lambda s: not _int_ok(s, low, high))


def _float_ok(text: str, low: float, high: float) -> bool:
    try:
        x = float(text)
    except ValueError:
        return False
    return math.isfinite(x) and low <= x <= high


def bad_floats(low: float, high: float) -> st.SearchStrategy[str]:
    numbers = st.floats(max_value=low, exclude_max=True) | st.floats(min_value=high, exclude_min=True) | \
        st.sampled_from([math.nan, math.inf, -math.inf, 1e308 * 10])
    weird = st.sampled_from(["", "nan", "-nan", "inf", "1e999", "1e-999x", "0x1p3", "\0", "1,5", "٣.٣e9"])
    return (numbers.map(repr) | weird | st.text(max_size=12)).filter(lambda s: not _float_ok(s, low, high))


# file names: unicode, controls and line breaks; no quote or backslash (show's escaping of those depends on the
# whole line), no NUL or / (a separate case)
names = st.text(st.characters(blacklist_characters="\0/'\"\\", blacklist_categories=("Cs",)), min_size=1, max_size=12)
nul_paths = st.sampled_from(["\0", "a\0b", f"{S}/\0", f"{S}/dir\0"])
flags = st.from_regex(r"--zz[a-z0-9-]{0,8}", fullmatch=True) | \
    st.text(st.characters(blacklist_characters="'\"\\=", blacklist_categories=("Cs",)), max_size=8).map(lambda t: "--zz" + t)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _device_ok(value: str) -> bool:
    from pytest_s2st.measure.device import parse_device

    try:
        parse_device(value)
    except ValueError:
        return False
    return True


# --- s2st-serve ---------------------------------------------------------------------------------------------

SERVE_INTS = {"--port": (0, 65535), "--queue-size": (1, None), "--chunk-samples": (1, None),
              "--threads": (1, serve.MAX_THREADS), "--stream-chunk-frames": (1, 100_000),
              "--stream-left-context": (0, 100_000)}
serve_values = st.one_of(
    *[st.tuples(st.just(option), bad_ints(*span), st.just(option)) for option, span in SERVE_INTS.items()],
    st.tuples(st.just("--demo-delay-s"), bad_floats(0.0, serve.MAX_DELAY_S), st.just("--demo-delay-s")),
    st.tuples(st.just("--device"), st.text(max_size=10).filter(lambda s: not _device_ok(s)), st.just("--device")),
    st.tuples(st.just("--host"), st.text(max_size=16).filter(lambda s: not _loopback(s)), st.just("host")),
    st.tuples(st.just("--served-model-name"), st.text(" \t\n\r\x0b\x0c\u3000", max_size=3), st.just("--served-model-name")),
    st.tuples(st.just("--identity-output"), st.sampled_from(["", f"{S}/dir", f"{S}/missing/id.json", f"{S}/file/id.json"])
              | nul_paths, st.just("--identity-output")),
)


@FUZZ
@given(bad=serve_values)
@example(bad=("--port", "70000", "--port"))       # was: bound by aiohttp after the model loaded: OverflowError traceback
@example(bad=("--port", "-1", "--port"))
@example(bad=("--threads", "0", "--threads"))       # was: 0 read as "unset"; -1 a RuntimeError from torch
@example(bad=("--threads", "-1", "--threads"))
@example(bad=("--demo-delay-s", "nan", "--demo-delay-s"))  # was: served; nan silently no delay, inf an error per request
@example(bad=("--demo-delay-s", "inf", "--demo-delay-s"))
@example(bad=("--demo-delay-s", "-1", "--demo-delay-s"))
@example(bad=("--stream-chunk-frames", "0", "--stream-chunk-frames"))  # was: ignored by the demo tone, served
@example(bad=("--identity-output", f"{S}/missing/id.json", "--identity-output"))  # was: an error once listening
@example(bad=("--identity-output", "a\0b", "--identity-output"))
@example(bad=("--device", "cuda:²", "--device"))    # was: ValueError from int() in the device parser
@example(bad=("--queue-size", "0", "--queue-size"))
def test_fuzz_serve_option(scratch, bad):
    option, value, name = bad
    COUNTS["serve_option"] += 1
    refused(serve.main, ["--demo-tone", "--port", "0", option, value], scratch, name)


serve_sources = st.one_of(
    st.tuples(st.sampled_from(["--case", "--s2st-config"]), st.just("") | nul_paths).map(lambda t: (t[0], t[1], None)),
    st.tuples(st.sampled_from(["--case", "--s2st-config"]),
              st.sampled_from([f"{S}/dir", f"{S}/missing", f"{S}/file/x"]), st.none()),
    st.tuples(st.just("--case"), st.just(f"{S}/case.json"), st.binary(max_size=60) | st.text(max_size=60).map(str.encode)
              | st.sampled_from([b"{}", b'{"path": "x.yaml"}', b"[]", b"null", b'{"case_id": 1, "config": {}}'])),
)


@FUZZ
@given(bad=serve_sources)
@example(bad=("--case", "a\0b", None))
@example(bad=("--case", f"{S}/case.json", b'{"path": "x.yaml"}'))
def test_fuzz_serve_case_source(scratch, bad):
    option, value, content = bad
    COUNTS["serve_source"] += 1
    if content is not None:
        (scratch / "case.json").write_bytes(content)
    refused(serve.main, ["--port", "0", option, value], scratch, option, value)


@pytest.mark.parametrize("option", ["--stream-left-context", "--stream-chunk-frames"])
def test_serve_refuses_stream_options_the_demo_tone_would_ignore(scratch, option):
    line = refused(serve.main, ["--demo-tone", "--port", "0", option, "3"], scratch, option)
    assert "the demo tone does not stream, so it would be ignored" in line


def test_serve_refuses_a_case_whose_number_overflows_in_one_line(scratch):
    """A case JSON holding 1e400 (well-formed JSON, no float holds it): refused on reading, naming the file
    and the number, before any Case or model is built (it was a traceback from int(inf))."""
    from pytest_s2st.cases import load_case
    from pytest_s2st.demo import DEMO_YAML

    (scratch / "demo.yaml").write_text(DEMO_YAML.replace("dataset.npy", "r.npy"))
    case = load_case(scratch / "demo.yaml", {}, lambda name: None).to_dict()
    case["general"]["dataset_size"] = case["stages"][0]["dataset_size"] = 12345678
    (scratch / "case.json").write_text(__import__("json").dumps(case).replace("12345678", "1e400"))
    line = refused(serve.main, ["--port", "0", "--case", f"{S}/case.json"], scratch, f"{S}/case.json")
    assert "the number 1e400 overflows to infinity" in line


# --- s2st-stage ---------------------------------------------------------------------------------------------

stage_values = st.one_of(
    st.tuples(st.just("--seed"), bad_ints(0, stage.MAX_SEED), st.just("--seed")),
    st.tuples(st.just("--size"), st.text(max_size=8).filter(lambda s: s not in ("tiny", "full")), st.just("--size")),
)
stage_outs = (st.just("") | nul_paths).map(lambda p: (p, "argument out")) | \
    st.sampled_from([f"{S}/file"]).map(lambda p: (p, p)) | \
    names.map(lambda n: (f"{S}/file/{n}", str(Path(f"{S}/file/{n}"))))  # named as Path writes it: file/. is file


@FUZZ
@given(bad=stage_values, size=st.sampled_from([[], ["--size", "full"]]))
@example(bad=("--seed", "-1", "--seed"), size=[])     # was: np.random.seed's ValueError once the build had begun
@example(bad=("--seed", str(2**32), "--seed"), size=["--size", "full"])
@example(bad=("--size", "huge", "--size"), size=[])   # was: argparse's usage block above the error: three lines
def test_fuzz_stage_option(scratch, bad, size):
    option, value, name = bad
    COUNTS["stage_option"] += 1
    refused(stage.main, [f"{S}/never", *size, option, value], scratch, name)


@FUZZ
@given(out=stage_outs, size=st.sampled_from([[], ["--size", "full"]]))
@example(out=("a\0b", "argument out"), size=[])              # was: past the checks into the build, ValueError there
@example(out=("", "argument out"), size=[])                  # was: "" is Path("."): staged into the working directory
@example(out=(f"{S}/file/x\ny", f"{S}/file/x\ny"), size=[])   # was: the line break printed as is: two lines
@example(out=(f"{S}/file/.", f"{S}/file"), size=[])
def test_fuzz_stage_out(scratch, out, size):
    path, name = out
    COUNTS["stage_out"] += 1
    refused(stage.main, [path, *size], scratch, name)


# --- s2st-dataset -------------------------------------------------------------------------------------------

RANDOM = ["random", "--n", "2", "--out", f"{S}/r2.npy"]
SUBSETS = ["subsets", "--npy", f"{S}/r.npy", "--out", f"{S}/sub"]
too_big = st.integers(dataset.MAX_RANDOM_BYTES // (200 * 80 * 4) + 1, 10**30).map(lambda n: ["--n", str(n)])
dataset_lines = st.one_of(
    *[st.tuples(st.just(RANDOM), st.tuples(st.just(o), bad_ints(1)).map(list), st.just(o))
      for o in ("--n", "--feat-dim", "--min-len", "--max-len")],
    st.tuples(st.just(RANDOM), st.tuples(st.just("--seed"), bad_ints(0)).map(list), st.just("--seed")),
    st.tuples(st.just(RANDOM), too_big, st.just("--n")),
    st.tuples(st.just(RANDOM), st.integers(2, 10**6).map(lambda n: ["--min-len", str(n), "--max-len", str(n - 1)]),
              st.just("--max-len")),
    st.tuples(st.just(RANDOM), (st.just("") | nul_paths).map(lambda p: ["--out", p]), st.just("--out")),
    st.tuples(st.just(RANDOM), st.sampled_from([f"{S}/dir", f"{S}/missing/r.npy"]).map(lambda p: ["--out", p]),
              st.just("--out")),
    st.tuples(st.just(SUBSETS), st.tuples(st.just("--n"), bad_ints(1)).map(list), st.just("--n")),
    st.tuples(st.just(SUBSETS), st.text(max_size=120).filter(lambda t: any(c in t for c in "/\\") or
                                                             not t.isprintable() or len(t) > 100)
              .map(lambda t: ["--dataset-save-token", t]), st.just("--dataset-save-token")),
    st.tuples(st.just(SUBSETS), (st.just("") | nul_paths).map(lambda p: ["--out", p]), st.just("--out")),
    st.tuples(st.just(SUBSETS), st.just(["--out", f"{S}/file"]), st.just(f"{S}/file")),
    st.tuples(st.just(["subsets", "--out", f"{S}/sub"]),
              st.sampled_from([f"{S}/missing", f"{S}/file"]).map(lambda p: ["--data", p, "--subset", "t", "--task", "x"]),
              st.just("--data")),
    st.tuples(st.just(["subsets", "--out", f"{S}/sub"]),
              st.sampled_from([f"{S}/missing", f"{S}/dir", f"{S}/file"]).map(lambda p: ["--npy", p]), st.just(S)),
    st.tuples(st.just(SUBSETS), st.sampled_from([f"{S}/missing", f"{S}/file"]).map(lambda p: ["--ref-dataset", p]),
              st.just(S)),
    st.tuples(st.just(["stats"]), (st.just("") | nul_paths).map(lambda p: [p]), st.just("argument file")),
    st.tuples(st.just(["stats"]), st.sampled_from([f"{S}/missing", f"{S}/dir", f"{S}/file"]).map(lambda p: [p]),
              st.just(S)),
    st.tuples(st.just([]), st.text(max_size=10).filter(lambda t: t not in ("subsets", "random", "stats")
                                                       and not t.startswith("-")).map(lambda t: [t]),
              st.just("invalid choice")),
)


@FUZZ
@given(bad=dataset_lines)
@example(bad=(RANDOM, ["--seed", "-1"], "--seed"))                 # was: default_rng's ValueError traceback
@example(bad=(RANDOM, ["--n", str(10**9)], "--n"))                 # was: ~64 GB of float32 generated in memory
@example(bad=(SUBSETS, ["--dataset-save-token", "a\0b"], "--dataset-save-token"))  # was: ValueError traceback
@example(bad=(SUBSETS, ["--dataset-save-token", "../../x"], "--dataset-save-token"))  # was: written outside --out
@example(bad=(["stats"], [""], "argument file"))
def test_fuzz_dataset_option(scratch, bad):
    base, extra, name = bad
    COUNTS["dataset_option"] += 1
    line = refused(dataset.main, [*base, *extra], scratch, name)
    assert not (scratch / "sub").exists() and not (scratch / "r2.npy").exists(), line


# --- s2st-merge and s2st-assess -------------------------------------------------------------------------------

junk = st.binary(max_size=80) | st.sampled_from([b"", b"{}", b"[]", b"null", b'{"benchmarks": 1}', b"\xff\xfe",
                                                 b'{"benchmarks": [], "machine_info": {}}', b"{" * 5000])
# (argv, content of S/in.json or None, what the line must name)
merge_lines = st.one_of(
    (st.just("") | nul_paths).map(lambda p: ([p, f"{S}/in.json"], None, "argument runs")),
    st.sampled_from([f"{S}/missing.json", f"{S}/dir"]).map(lambda p: ([p, f"{S}/in.json"], b"{}", p)),
    junk.map(lambda b: ([f"{S}/in.json", f"{S}/in2.json"], b, f"{S}/in.json")),
    (st.just("") | nul_paths).map(lambda p: ([f"{S}/in.json", f"{S}/in2.json", "-o", p], None, "-o")),
)


@FUZZ
@given(bad=merge_lines)
@example(bad=(["", f"{S}/in.json"], None, "argument runs"))  # was: Path("") read as the working directory
@example(bad=([f"{S}/in.json", f"{S}/in2.json", "-o", "a\0b"], None, "-o"))  # was: argparse's usage block too
def test_fuzz_merge(scratch, bad):
    argv, content, name = bad
    COUNTS["merge"] += 1
    (scratch / "in.json").write_bytes(content or b"")
    (scratch / "in2.json").write_bytes(b"{}")
    refused(merge.main, [*argv, *([] if "-o" in argv else ["-o", f"{S}/m.json"])], scratch, name)
    assert not (scratch / "m.json").exists()


def _a_policy(content: bytes | None) -> bool:
    import json

    from pytest_s2st.errors import S2STError
    from pytest_s2st.quality import Policy

    try:
        Policy.from_mapping(json.loads(content or b""), "fuzz")
    except (ValueError, S2STError):
        return False
    return True


RUNS = ["--baseline", f"{S}/dir", "--candidate", f"{S}/dir"]
assess_lines = st.one_of(
    st.tuples(st.sampled_from(["--baseline", "--candidate", "--policy", "--quality", "--json", "--write-scores"]),
              st.just("") | nul_paths).map(lambda t: ([*RUNS, t[0], t[1]], None, t[0])),
    st.tuples(st.sampled_from(["--policy", "--quality"]), junk).map(lambda t: ([*RUNS, t[0], f"{S}/in.json"], t[1],
                                                                              f"{S}/in.json")),
    st.sampled_from([[], RUNS[:2], RUNS[2:]]).map(lambda a: (a, None, "--baseline and --candidate are required")),
)


@FUZZ
@given(bad=assess_lines)
@example(bad=([*RUNS, "--json", "a\0b"], None, "--json"))  # was: argparse's usage block above the error
@example(bad=([*RUNS, "--policy", f"{S}/in.json"], b"[]", f"{S}/in.json"))
def test_fuzz_assess(scratch, bad):
    argv, content, name = bad
    assume(not ("--policy" in argv and _a_policy(content)))  # {} is a policy: no thresholds, nothing to refuse
    COUNTS["assess"] += 1
    (scratch / "in.json").write_bytes(content or b"")
    refused(assess.main, argv, scratch, name)


@FUZZ
@given(flag=flags, which=st.sampled_from(["serve", "stage", "dataset", "merge", "assess"]))
@example(flag="--zz\nx", which="dataset")  # was: printed as is, two lines
@example(flag="--zz\nx", which="serve")
def test_fuzz_unknown_option(scratch, flag, which):
    COUNTS["unknown_option"] += 1
    main, argv = {"serve": (serve.main, ["--demo-tone", "--port", "0"]), "stage": (stage.main, [f"{S}/never"]),
                  "dataset": (dataset.main, RANDOM), "merge": (merge.main, [f"{S}/in.json", f"{S}/in2.json", "-o", f"{S}/m.json"]),
                  "assess": (assess.main, RUNS)}[which]
    assume(flag.strip() and "\0" not in flag)
    refused(main, [*argv, flag], scratch, flag)
