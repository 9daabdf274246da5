# Two commands do all the set-up on a fresh machine:
#   make test   creates .venv when missing, installs, runs the whole test suite
#   make bench  same set-up, then benchmarks the models of the embedded default (tiny real models)
#   make selfbench  the tool's own benchmarks (load-generator overhead, vs upstream, measurement cost, ...)
# Opt-in, never in `make test`/`make bench`/CI:
#   make bench-full  builds the full-size fairseq models (~1 GB) and Qwen3-TTS (~2.5 GB) into the cache once, then measures them
#   make bench-full-stream  full-size Qwen3-TTS behind s2st-serve: non-streaming baseline vs streaming candidate
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH := torch==2.13.0
FAIRSEQ := $(shell grep -o 'fairseq-fixed==[0-9.]*' pyproject.toml)
# The extras `make install` installs -- the README's install is `make install`, so `make test` and `make bench`
# find this venv complete and never reinstall (what each brings: docs/install.md):
#   dev      the test suite: pytest-xdist, hypothesis (fuzzing), check-jsonschema and zizmor (the CI files),
#            aiohttp (service), matplotlib (--s2st-plot), openai (the OpenAI-protocol tests)
#   fairseq  fairseq-fixed, soundfile, sentencepiece: the fairseq pipelines and the embedded tiny fairseq models
#   papi     python-papi: --s2st-flops=papi (hardware FLOP counters, where the CPU exposes them)
#   quality  jiwer, pocketsphinx, librosa, scipy, webrtcvad, sacrebleu (+ resemblyzer, below): the quality gate's
#            offline scorers (WER, speaker similarity, durations) and BLEU/chrF
#   history  scipy (the change points' test), psycopg (a PostgreSQL history); dev adds ruptures (a test oracle)
#   qwen     qwen-tts: the tiny Qwen3-TTS case of `make bench` and the 0.6B of `make bench-full`
# EXTRAS=dev,fairseq is enough for the callable path and the fairseq cases (the Qwen3-TTS case is then left out)
EXTRAS ?= dev,fairseq,history,papi,quality,qwen
# where torch comes from: PyTorch's CPU wheel index first (PyPI's Linux x86-64 torch is a multi-GB CUDA build);
# where that index cannot be reached, PyPI's. TORCH_INDEX= (empty): PyPI only
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
comma := ,
# exits 0 when the URL answers within 10 s
REACHABLE = $(PY) -c "import sys, urllib.request as r; r.urlopen(sys.argv[1], timeout=10).close()"
STAMP := $(VENV)/.s2st-installed-$(subst $(comma),-,$(EXTRAS))
PYTEST_ARGS ?=
TEST_WORKERS ?= auto
BENCH_ARGS ?=
SELFBENCH_ARGS ?=

.PHONY: test bench selfbench bench-power bench-full bench-full-stream install sysdeps clean

install: $(STAMP)

# torch goes in first and a constraint keeps it: any requirement admitting a newer torch would
# otherwise pull a multi-GB CUDA build.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# the index is asked once, 10 s at most: handed to pip unreachable, pip retries it 5 times for torch and for
	# each of its 9 dependencies (78 s of a 3 min install where its name does not resolve)
	$(if $(TORCH_INDEX),if $(REACHABLE) "$(TORCH_INDEX)/torch/" 2>/dev/null; then $(PY) -m pip install -q --index-url $(TORCH_INDEX) $(TORCH); else \
	  echo "$(TORCH_INDEX) cannot be reached: torch from PyPI (a CUDA build on Linux x86-64; it runs on CPU too)"; \
	  $(PY) -m pip install -q $(TORCH); fi,$(PY) -m pip install -q $(TORCH))
	echo "$(TORCH)" > $(VENV)/constraints.txt
	# fairseq-fixed is an sdist whose build requires torch: pip's isolated build environment would fetch one of
	# its own (from PyPI a multi-GB CUDA build, whatever TORCH_INDEX says), so it is built against the venv's torch
	case ",$(EXTRAS)," in *,fairseq,*) $(PY) -m pip install -q -c $(VENV)/constraints.txt setuptools wheel cython numpy && \
	  $(PY) -m pip install -q -c $(VENV)/constraints.txt --no-build-isolation $(FAIRSEQ);; esac
	$(PY) -m pip install -q -c $(VENV)/constraints.txt -e ".[$(EXTRAS)]"
	case ",$(EXTRAS)," in *,quality,*) $(PY) -m pip install -q --no-deps resemblyzer==0.1.4;; esac
	# qwen-tts imports torchaudio; PyPI has only CUDA torchaudio builds, whose compiled libs fail to load
	# beside CPU torch. qwen-tts needs only torchaudio's pure-Python parts, and torchaudio treats a missing
	# lib/*.so as "extension unavailable" -- so the libs are removed, and only when they fail to load.
	case ",$(EXTRAS)," in *,qwen,*) $(PY) -c "import torchaudio" 2>/dev/null || rm -f "$$($(PY) -c 'import importlib.util as u, pathlib as p; print(p.Path(u.find_spec("torchaudio").origin).parent / "lib")')"/*.so;; esac
	$(PY) -c "import torch; assert torch.__version__.startswith('2.13.0'), torch.__version__"
	# vLLM-Omni's continuity function is a test oracle (tests/test_stream_gate.py): its pure-Python wheel,
	# without dependencies, kept beside the venv; the test loads that one file from it by path (dev only)
	case ",$(EXTRAS)," in *,dev,*) $(PY) -m pip download -q --no-deps vllm-omni==0.30.0 -d $(VENV)/wheels;; esac
	touch $(STAMP)

# Debian packages some tests use as a real system under test (espeak-ng speech, sox; valgrind with its
# callgrind.h for the instruction count); needs root.
sysdeps:
	@command -v espeak-ng >/dev/null && command -v sox >/dev/null && command -v valgrind >/dev/null && \
	  command -v chromium >/dev/null && ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq espeak-ng sox libsndfile1 valgrind \
	    postgresql chromium >/dev/null; }

# the suite runs on every core the machine has (pytest-xdist, TEST_WORKERS=0 for one process), then the
# tests that bound a duration or a rate (marked serial in tests/conftest.py) run on their own; both always run
test: install sysdeps
	rc=0; \
	$(PY) -m pytest tests -n $(TEST_WORKERS) --dist worksteal -m "not serial" $(PYTEST_ARGS) || rc=$$?; \
	$(PY) -m pytest tests -m serial $(PYTEST_ARGS) || rc=$$?; \
	exit $$rc

# the models: every embedded-default case's inference rows and its service levels, one line per test as it
# finishes (-v); the self-benchmarks are deselected there (benchmarks/conftest.py)
bench: install
	$(PY) -m pytest benchmarks -v $(BENCH_ARGS)

# the self-benchmarks (marked selfbench in benchmarks/conftest.py): tens of minutes on 2 cores
selfbench: install sysdeps
	$(PY) -m pytest benchmarks -v -m selfbench $(SELFBENCH_ARGS)

# the comparison's own false-alarm and detection rates (hundreds of processes, ~25 min): marked `power`, which
# `make bench` and `make selfbench` leave out
bench-power: install
	$(PY) -m pytest benchmarks/test_compare_power.py -m power -s $(BENCH_ARGS)

# full-size random-weight models (the released architectures' sizes), built once into $$S2ST_CACHE_DIR: per-model
# numbers at 1 and 2 threads, each measuring pass's cost on the S2T at three sizes, memory truth; the JSON of
# every table goes to FULL_REPORT_DIR. The plugin's own run over the fairseq configs/full/*.yaml follows, as users run
# it (qwen3tts.yaml is a service config without a dataset: make bench-full-stream serves it)
FULL_REPORT_DIR ?= .benchmarks/full
bench-full: install
	# each builder prints its folder alone on stdout; a failed build stops here (an assignment keeps the status)
	full=$$($(PY) -m pytest_s2st.tiny.folder fairseq-full) && qwen=$$($(PY) -m pytest_s2st.tiny.folder qwen3tts-full) && \
	S2ST_FULL_REPORT_DIR=$(FULL_REPORT_DIR) QWEN3TTS_FULL_DIR=$$qwen \
	  $(PY) -m pytest benchmarks/test_full_size.py -m fullsize -s $(BENCH_ARGS) && \
	S2ST_FULL_DIR=$$full QWEN3TTS_FULL_DIR=$$qwen \
	  $(PY) -m pytest benchmarks/test_inference.py \
	  $(foreach c,$(filter-out configs/full/qwen3tts.yaml,$(wildcard configs/full/*.yaml)),--s2st-config $(c)) $(BENCH_ARGS)

# full-size Qwen3-TTS (~2.5 GB, built once into the cache unless QWEN3TTS_FULL_DIR names a build) behind s2st-serve:
# float32 vs bfloat16 step time, then the seed's flow -- the non-streaming baseline vs the --stream candidate under
# the frozen policy, AB/BA over S2ST_FULL_STREAM_LEVELS (default c1; e.g. S2ST_FULL_STREAM_LEVELS=1,4). On 2 shared
# cores a codec frame takes 1-4 s: without warm-ups (S2ST_FULL_WARMUP=0) 100 frames (8 s of audio) took 6 min at c1,
# with them twice that; both servers hold the model at once (up to 2 x ~5.5 GB in float32)
bench-full-stream: install
	S2ST_FULL_REPORT_DIR=$(FULL_REPORT_DIR) $(PY) -m pytest benchmarks/test_full_size_stream.py -m fullsize -s $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .benchmarks .pytest_cache
