"""Shared builders for pytester sessions: a tiny callable model, an npy dataset, a config."""
from __future__ import annotations

import json
import os
import re
import subprocess
import textwrap
from pathlib import Path

import numpy as np

MODEL_PY = '''
import numpy as np

def build_numpy(scale=1.0):
    """A pure-numpy model: no torch, so the torch FLOP counter must say it saw nothing."""
    def forward(sample):
        x = np.asarray(sample["net_input"]["src_tokens"], dtype=np.float32)
        return x * scale
    return forward

def build_linear(hidden=32):
    import torch
    torch.manual_seed(0)
    layer = torch.nn.Linear(80, hidden, bias=False)
    def forward(sample):
        with torch.inference_mode():
            return layer(torch.as_tensor(sample["net_input"]["src_tokens"], dtype=torch.float32))
    return forward

def build_second(hidden=32):
    import torch
    torch.manual_seed(1)
    layer = torch.nn.Linear(hidden, 8, bias=False)
    def forward(x):
        with torch.inference_mode():
            return layer(x)
    return forward

def build_alloc(mib=64):
    def forward(sample):
        buf = np.ones(mib * 2**20 // 8, dtype=np.float64)
        return float(buf[-1])
    return forward

def build_speech(sample_rate=22050):
    """A speech-producing stage: a sine whose length follows the sample's frame count."""
    def forward(sample):
        n = int(np.asarray(sample["net_input"]["src_lengths"]).reshape(-1)[0]) * 441
        t = np.arange(n) / sample_rate
        return {"waveform": (0.2 * np.sin(2 * np.pi * 330 * t)).astype(np.float32), "sample_rate": sample_rate}
    return forward

def not_a_factory_value():
    return 42

NOT_CALLABLE = 3
'''


def make_dataset(path: Path, n: int = 3, frames: int = 20, dim: int = 80) -> Path:
    samples = [
        {"id": i, "net_input": {"src_tokens": np.full((frames, dim), 0.01 * (i + 1), dtype=np.float32),
                                "src_lengths": np.array([frames])}}
        for i in range(n)
    ]
    arr = np.empty(len(samples), dtype=object)
    arr[:] = samples
    np.save(path, arr, allow_pickle=True)
    return path


def write_case(root: Path, name: str, stages: list[str], general_extra: str = "", stage_extra: str = "") -> Path:
    """A callable config over models.py in root; stages are factory names in models.py."""
    (root / "models.py").write_text(MODEL_PY)
    if not (root / "data.npy").exists():
        make_dataset(root / "data.npy")
    body = f"general:\n  name: {name}\n  model_type: callable\n  dataset_path: data.npy\n"
    body += textwrap.indent(textwrap.dedent(general_extra), "  ") if general_extra else ""
    for i, factory in enumerate(stages, start=1):
        body += f"stage{i}:\n  entry: models.py:{factory}\n"
        if stage_extra:
            body += textwrap.indent(textwrap.dedent(stage_extra), "  ")
    path = root / f"{name}.yaml"
    path.write_text(body)
    return path


BENCH_TEST = '''
def test_inference(s2st_pipeline, s2st_dataset, s2st_benchmark):
    s2st_benchmark(s2st_pipeline, s2st_dataset)
'''


TONE_PY = '''
import time

import numpy as np

def make():
    """Text in, speech out: 100 samples of a constant per character, at 8 kHz."""
    return lambda sample: {"waveform": np.full(len(sample["text"]) * 100, 0.2, np.float32), "sample_rate": 8000}

def build_tone(sample_rate=16000, delay_s=0.0):
    """A speech-producing callable: a sine whose length follows the text (a stand-in TTS with real WAV output)."""
    def forward(sample):
        if delay_s:
            time.sleep(delay_s)
        n = int(sample_rate * (0.2 + 0.02 * len(sample["text"])))
        t = np.arange(n) / sample_rate
        return {"waveform": (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32), "sample_rate": sample_rate}
    return forward
'''

TONE_WORKLOAD = [{"id": f"u{i}", "text": "hello world" * (i + 1), "language": "en", "voice": "a", "seed": i}
                 for i in range(4)]


def write_tone_case(root: Path, name: str = "tts", model_type: str = "callable", general_extra: str = "",
                    service: bool = False) -> Path:
    """A config whose one stage turns text into speech (tone.py in root), for the reference server: ``make``
    (100 samples of a constant per character at 8 kHz), or with ``service`` ``build_tone`` (a 220 Hz sine
    whose length follows the text, 16 kHz) with a workload of 4 items (wl.jsonl), concurrency [1, 2] and
    one warm-up, as a service benchmark runs it. ``general_extra``: more lines of the general section."""
    (root / "tone.py").write_text(TONE_PY)
    body = f"general:\n  name: {name}\n  model_type: {model_type}\n"
    if service:
        (root / "wl.jsonl").write_text("".join(json.dumps(item) + "\n" for item in TONE_WORKLOAD))
        body += "  workload: wl.jsonl\n  concurrency: [1, 2]\n  warmup: 1\n"
    body += textwrap.indent(textwrap.dedent(general_extra), "  ") if general_extra else ""
    body += f"stage1:\n  entry: tone.py:{'build_tone' if service else 'make'}\n"
    path = root / f"{name}.yaml"
    path.write_text(body)
    return path


# README and docs output examples are matched on structure: numbers masked
NUMBER = re.compile(r"(?<![A-Za-z_\d.])[-+x]?\d[\d,]*(\.\d+)?(e[-+]?\d+)?(\s?(ns|us|µs|ms|s|KiB|MiB|GiB|k|M|G|%))?(?![A-Za-z])")


def masked(line: str) -> str:
    line = NUMBER.sub("#", line)
    # a change is a signed percent, or, on an RSS metric moving less than its noise floor, "<1 MiB: noise": both
    # are the same cell, matched on structure (which one a run prints depends on a few KiB)
    line = re.sub(r"\((#|<#: noise)\)", "(#)", line)
    line = re.sub(r"-{3,}", "---", line)
    return re.sub(r"\s+", " ", line).strip()


# a model whose cost is CPU work only (a busy wait, as a slower model is), and its benchmark: the code-version tests
BUSY_MODEL = '''
import time

DELAY = {delay}


def model(x):
    end = time.perf_counter() + DELAY  # a busy wait: CPU work, as a slower model is
    while time.perf_counter() < end:
        pass
    return x
'''
BUSY_BENCH = '''
from model import model


def test_model(s2st_benchmark):
    s2st_benchmark(model, [1, 2, 3, 4])
'''


XDIST_VARIABLES = ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID")


def session_env() -> dict:
    """The environment for a pytest session a module-scoped fixture starts: without xdist's worker variables
    (conftest's autouse fixture removes them for each test, but a module fixture runs before it), which would make
    pytest-benchmark disable itself there and save nothing."""
    import os

    return {k: v for k, v in os.environ.items() if k not in XDIST_VARIABLES}


def git(root: Path, *args: str) -> str:
    """git in ``root`` with an author and committer of its own (a CI runner has none configured)."""
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", *args], cwd=root, env=env, check=True, capture_output=True, text=True).stdout


def git_repo(root: Path, files: dict[str, str]) -> Path:
    """A git repository at ``root`` holding ``files``, committed on branch main as "base"."""
    root.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (root / name).write_text(text)
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "base")
    return root


# an inline test module's two callables, 2 ms and 1 ms a call (the A/B tests' slower candidate, faster baseline)
SLOW_FAST = '''
import time


def slow(x):
    time.sleep(0.002)
    return x


def fast(x):
    time.sleep(0.001)
    return x
'''
