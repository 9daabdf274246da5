"""pytest_s2st.runs: names, the one records reader, load_run and the one per-request metrics definition."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_s2st import runs
from pytest_s2st.errors import S2STError


def test_names_and_layout(tmp_path):
    assert (runs.REQUESTS, runs.WAV_DIR, runs.SUMMARY) == ("requests.jsonl", "wav", "summary.json")
    assert runs.level_name(4) == "c4"
    assert runs.request_id(4, 7, warmup=False) == "c4-r7"
    assert runs.request_id(1, 0, warmup=True) == "c1-w0"
    assert runs.level_dir(tmp_path, "case-a", 8) == tmp_path / "case-a" / "c8"
    assert runs.level_dir(str(tmp_path), "case-a", 1) == tmp_path / "case-a" / "c1"
    assert runs.wav_path(tmp_path, "c4-r7") == tmp_path / "wav" / "c4-r7.wav"
    for bad in ("../escape", "", ".hidden", "a/b", None):
        with pytest.raises(S2STError, match="not a safe file name"):
            runs.wav_path(tmp_path, bad)


def _write(out: Path, text: str) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    (out / runs.REQUESTS).write_text(text, encoding="utf-8")
    return out


def test_read_records_drops_only_a_truncated_last_line(tmp_path):
    good = [{"id": "c1-r0", "status": "ok"}, {"id": "c1-r1", "status": "error"}]
    for r in good:
        runs.append_record(tmp_path, r)
    assert runs.read_records(tmp_path) == good
    with open(tmp_path / runs.REQUESTS, "a") as fh:
        fh.write('{"id": "c1-r2", "sta')  # killed mid-write
    assert runs.read_records(tmp_path) == good
    # a complete last object without its newline, but lacking an id, is also an unfinished record
    _write(tmp_path, '{"id": "c1-r0"}\n{"status": "ok"}')
    assert runs.read_records(tmp_path) == [{"id": "c1-r0"}]
    assert runs.read_records(tmp_path / "nothing") == []
    _write(tmp_path, '{"id": "c1-r0"}\n\n{"id": "c1-r1"}\n')  # blank lines are not records
    assert [r["id"] for r in runs.read_records(tmp_path)] == ["c1-r0", "c1-r1"]


@pytest.mark.parametrize("middle, why", [
    ("{broken", "unreadable request record"),
    ('{"status": "ok"}', "string 'id'"),
    ('{"id": 3, "status": "ok"}', "string 'id'"),
    ('["c1-r1"]', "string 'id'"),
])
def test_read_records_corrupt_middle_line_names_file_and_line(tmp_path, middle, why):
    _write(tmp_path, '{"id": "c1-r0"}\n' + middle + '\n{"id": "c1-r2"}\n')
    with pytest.raises(S2STError, match=r"requests\.jsonl:2: unreadable request record") as e:
        runs.read_records(tmp_path)
    assert why in str(e.value) and "\n" not in str(e.value)
    # a corrupt line that ends the file but has its newline was finished: still corruption
    _write(tmp_path, '{"id": "c1-r0"}\n' + middle + '\n')
    with pytest.raises(S2STError, match=r"requests\.jsonl:2"):
        runs.read_records(tmp_path)


def test_write_and_read_summary_merge_levels(tmp_path):
    assert runs.read_summary(tmp_path) == {}
    runs.write_summary(tmp_path, {"n": 1}, concurrency=1, endpoint="http://h/v1", identity={"a": 1}, extra={"x": 1})
    runs.write_summary(tmp_path, {"n": 2}, concurrency=4, endpoint="http://h/v1", identity={"a": 1})
    data = runs.read_summary(tmp_path)
    assert data["by_concurrency"]["1"] == {"concurrency": 1, "summary": {"n": 1}, "x": 1}
    assert data["by_concurrency"]["4"] == {"concurrency": 4, "summary": {"n": 2}}
    with pytest.raises(S2STError, match="holds runs against http://h/v1"):
        runs.write_summary(tmp_path, {}, concurrency=2, endpoint="http://other/v1", identity=None)
    (tmp_path / runs.SUMMARY).write_text("[1]")
    with pytest.raises(S2STError, match="unreadable summary"):
        runs.read_summary(tmp_path)
    (tmp_path / runs.SUMMARY).write_text("{oops")
    with pytest.raises(S2STError, match="cannot read summary: not valid JSON"):
        runs.read_summary(tmp_path)


def test_load_run(tmp_path):
    assert runs.load_run(tmp_path / "nowhere").problem.endswith("is not a directory")
    assert runs.load_run(tmp_path).problem.endswith("requests.jsonl is missing")
    _write(tmp_path, "\n")
    assert runs.load_run(tmp_path).problem.endswith("holds no request records")
    _write(tmp_path, '{"id": "c1-r0", "status": "error"}\n{"id": "c1-r0", "status": "ok", "wav": "wav/x.wav"}\n'
                     '{"id": "c1-r1", "status": "ok"}\n')
    (tmp_path / runs.SUMMARY).write_text(json.dumps({"by_concurrency": {"1": {"policy": {"p": 1}}}}))
    run = runs.load_run(tmp_path)
    assert run.problem is None and run.records["c1-r0"]["status"] == "ok"  # a retried id: the last kept
    assert run.wav("c1-r0") == tmp_path / "wav" / "x.wav" and run.wav("c1-r1") == tmp_path / "wav" / "c1-r1.wav"
    assert run.saved_policy() == {"p": 1}


def rec(**kw):
    return {"id": "c1-r0", "status": "ok", "send_t": 1.0, "first_audio_t": 1.25, "done_t": 2.0,
            "audio_seconds": 3.0, **kw}


def test_request_metrics_by_hand():
    m = runs.request_metrics(rec())
    assert m == {"ttfa_s": 0.25, "latency_s": 1.0, "rtf": pytest.approx(1 / 3)}
    assert runs.request_metrics(rec(status="error", error="HTTP 500")) == {"ttfa_s": None, "latency_s": None, "rtf": None}
    assert runs.request_metrics(rec(status=None)) == {"ttfa_s": None, "latency_s": None, "rtf": None}
    no_audio = rec()
    del no_audio["audio_seconds"]
    assert runs.request_metrics(no_audio) == {"ttfa_s": 0.25, "latency_s": 1.0, "rtf": None}
    assert runs.request_metrics(rec(audio_seconds=0.0))["rtf"] is None
    assert runs.request_metrics(rec(audio_seconds=-1.0))["rtf"] is None


def test_request_metrics_prefers_own_ttfa_and_refuses_non_numbers():
    assert runs.request_metrics(rec(ttfa_s=0.1))["ttfa_s"] == 0.1  # the record's own TTFA wins
    assert runs.request_metrics(rec(ttfa_s=True))["ttfa_s"] is None  # a bool is no number: no evidence
    assert runs.request_metrics(rec(first_audio_t=True))["ttfa_s"] is None
    assert runs.request_metrics(rec(send_t="1.0")) == {"ttfa_s": None, "latency_s": None, "rtf": None}
    assert runs.request_metrics(rec(done_t=None)) == {"ttfa_s": 0.25, "latency_s": None, "rtf": None}
    assert runs.request_metrics(rec(audio_seconds=True))["rtf"] is None


def test_runs_imports_nothing_heavy():
    code = ("import sys, pytest_s2st.runs; "
            "print(sorted(m for m in ('pytest', 'torch', 'aiohttp', 'numpy', 'soundfile') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1]).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("name", ["../up", "/abs/path", "a/b", "..", ".", "", "nul\x00byte", "x" * 500,
                                  "tab\there", "dé", "\ud800"])
def test_safe_name_stays_under_its_root(tmp_path, name):
    from pytest_s2st.runs import safe_name

    part = safe_name(name)
    assert "/" not in part and "\x00" not in part and part not in (".", "..", "") and len(part) <= 100
    target = runs.level_dir(tmp_path, name, 2, test=name).resolve()
    assert target.is_relative_to(tmp_path.resolve()) and target.parent.parent.parent == tmp_path.resolve()


def test_safe_name_keeps_safe_names_and_keeps_distinct_names_apart():
    from pytest_s2st.runs import safe_name

    assert safe_name("TTS-tiny") == "TTS-tiny" and safe_name("callable-demo_1.v2") == "callable-demo_1.v2"
    names = ["a/b", "a_b", "a:b", "a b", "../a_b", "x" * 200, "x" * 201]
    assert len({safe_name(n) for n in names}) == len(names)


# --- exact names, formats and edge cases (added from a mutation-testing pass) ------------------------------


def _digest(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:10]


def test_safe_name_exact_spelling():
    from pytest_s2st.runs import safe_name

    assert safe_name("a/b") == f"a_b-{_digest('a/b')}"  # each unsafe character becomes one "_"
    assert safe_name("X y") == f"X_y-{_digest('X y')}"  # only dots are stripped from the ends
    assert safe_name(".hidden/x.") == f"hidden_x-{_digest('.hidden/x.')}"
    assert safe_name("..") == f"_-{_digest('..')}"  # nothing left: one "_"
    assert safe_name("x" * 100) == "x" * 100  # exactly MAX_NAME safe characters: kept as is
    long = safe_name("x" * 101)
    assert long == "x" * 89 + "-" + _digest("x" * 101) and len(long) == 100


def test_level_dir_with_a_test_part(tmp_path):
    assert runs.level_dir(tmp_path, "case", 2, test="t1") == tmp_path / "case" / "t1" / "c2"
    assert runs.level_dir(tmp_path, "case", 2, test="a/b") == tmp_path / "case" / f"a_b-{_digest('a/b')}" / "c2"


@pytest.mark.parametrize("endpoint, normal", [
    ("http://h", "http://h/v1/audio/speech"),
    ("http://h/", "http://h/v1/audio/speech"),
    ("http://h:8080/", "http://h:8080/v1/audio/speech"),  # a non-default port is kept
    ("https://h:443/x", "https://h/x"),
    ("http://h:443/x", "http://h:443/x"),  # 443 is the default of https only
    ("http://h:65535/a/b", "http://h:65535/a/b"),
    ("http://h/x?", "http://h/x"),  # an empty query is no query
    ("http://h/p?a b=c&d=%41#frag", "http://h/p?a%20b=c&d=%41"),  # the query is %-escaped like the path
    ("http://h?k=v/w:x@y", "http://h/v1/audio/speech?k=v/w:x@y"),
    ("http://h/v1/a:b@c;d=e,f!$&'()*+~", "http://h/v1/a:b@c;d=e,f!$&'()*+~"),  # path sub-delims stay as written
    ("HTTPS://H.Example.:444", "https://h.example.:444/v1/audio/speech"),
    ("https://[2001:DB8:0:0::1]:443/", "https://[2001:db8::1]/v1/audio/speech"),
    ("http://bücher.de", "http://xn--bcher-kva.de/v1/audio/speech"),
])
def test_normalize_endpoint_by_hand(endpoint, normal):
    assert runs.normalize_endpoint(endpoint) == normal
    assert runs.normalize_endpoint(normal) == normal


@pytest.mark.parametrize("endpoint, why", [
    (3, "not a string"),
    (None, "not a string"),
    ("http://user@h:8000", "credentials in the URL are not sent"),  # a user alone is a credential too
    ("http://:pw@h", "credentials in the URL are not sent"),
    ("http://h:0", "port is not a number in 1-65535"),
    ("http://h:65536", "port is not a number in 1-65535"),
    ("http://h:abc", "port is not a number in 1-65535"),
    ("http://[::1", "Invalid IPv6 URL"),  # urlsplit's own words when they are not about the port
    ("ftp://h/x", "scheme 'ftp' is not http or https"),
    ("h:8000", "scheme 'h' is not http or https"),
    ("//h:8000", "scheme '(none)' is not http or https"),
    ("http:///x", "no host"),
    ("http://a_b!c/x", "host 'a_b!c' is not a host name"),
    ("http://a..b/", "host 'a..b' is not a host name"),
    ("http://h/\udcff", "path or query is not text (surrogates not allowed)"),
    ("http://h?q=\udcff", "path or query is not text (surrogates not allowed)"),
])
def test_normalize_endpoint_refusals_are_exact(endpoint, why):
    with pytest.raises(S2STError) as e:
        runs.normalize_endpoint(endpoint)
    assert str(e.value) == f"endpoint {endpoint!r}: {why}; expected http(s)://host:port[/v1/audio/speech]"


def test_append_record_is_one_compact_utf8_line(tmp_path):
    runs.append_record(tmp_path, {"id": "c1-r0", "text": "é 你好", "n": [1, 2]})
    assert (tmp_path / runs.REQUESTS).read_bytes() == '{"id":"c1-r0","text":"é 你好","n":[1,2]}\n'.encode("utf-8")


def test_wav_bytes_header_by_hand(tmp_path):
    import struct

    pcm = bytes(range(10))  # five int16 samples
    data = runs.wav_bytes(pcm, 16000)
    assert len(data) == 44 + 10 and data[44:] == pcm
    fields = struct.unpack("<4sI4s4sIHHIIHH4sI", data[:44])
    assert fields == (b"RIFF", 36 + 10, b"WAVE", b"fmt ", 16, 1, 1, 16000, 32000, 2, 16, b"data", 10)
    with pytest.raises(ValueError, match="3 bytes is not whole int16 samples"):
        runs.wav_bytes(b"abc", 8000)
    target = tmp_path / "a" / "b" / "x.wav"  # parents are made
    runs.write_wav_atomic(target, pcm, 16000)
    runs.write_wav_atomic(target, pcm[:4], 8000)  # and may already exist: replaced whole
    assert target.read_bytes() == runs.wav_bytes(pcm[:4], 8000)
    assert sorted(p.name for p in target.parent.iterdir()) == ["x.wav"]  # no temp file left


def test_write_summary_saves_identity_and_accepts_an_old_spelling(tmp_path):
    runs.write_summary(tmp_path, {"n": 1}, concurrency=1, endpoint="http://h:80", identity={"model": "m"})
    data = runs.read_summary(tmp_path)
    assert data["identity"] == {"model": "m"} and data["endpoint"] == "http://h/v1/audio/speech"
    # a summary written by an older writer, with another spelling of the same endpoint
    (tmp_path / runs.SUMMARY).write_text(json.dumps({"endpoint": "HTTP://H:80/", "by_concurrency": {}}))
    runs.write_summary(tmp_path, {"n": 2}, concurrency=2, endpoint="http://h/v1/audio/speech", identity=None)
    data = runs.read_summary(tmp_path)
    assert data["endpoint"] == "http://h/v1/audio/speech" and data["identity"] is None
    assert sorted(p.name for p in tmp_path.iterdir()) == [runs.SUMMARY]


def test_read_records_survives_a_write_killed_inside_a_utf8_character(tmp_path):
    good = [{"id": "c1-r0", "text": "你好"}]
    (tmp_path / runs.REQUESTS).write_bytes(json.dumps(good[0], ensure_ascii=False).encode() + b"\n"
                                           + '{"id": "c1-r1", "text": "你'.encode()[:-1])  # cut mid-character
    assert runs.read_records(tmp_path) == good


def test_read_records_corrupt_middle_line_of_a_file_without_final_newline(tmp_path):
    _write(tmp_path, '{"id": "c1-r0"}\n{broken\n{"id": "c1-r2"}')
    with pytest.raises(S2STError, match=r"requests\.jsonl:2: unreadable request record"):
        runs.read_records(tmp_path)


def test_problem_runs_keep_their_path_and_are_empty(tmp_path):
    for path, summary in ((tmp_path / "nowhere", None), (tmp_path, None), (tmp_path / "empty", {"n": 0})):
        if path.name == "empty":
            _write(path, "\n")
            (path / runs.SUMMARY).write_text(json.dumps(summary))
        run = runs.load_run(path)
        assert run.problem and run.path == path and run.records == {} and run.summary == (summary or {})


def test_run_wav_falls_back_to_the_id_name(tmp_path):
    run = runs.Run(tmp_path, {"c1-r0": {"wav": ""}, "c1-r1": {"wav": 5}, "c1-r2": {"wav": "elsewhere/a.wav"}}, {})
    assert run.wav("c1-r0") == tmp_path / "wav" / "c1-r0.wav"
    assert run.wav("c1-r1") == tmp_path / "wav" / "c1-r1.wav"
    assert run.wav("c1-r2") == tmp_path / "elsewhere" / "a.wav"
    assert run.wav("c9-r9") == tmp_path / "wav" / "c9-r9.wav"  # an id without a record
