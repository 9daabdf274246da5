#!/usr/bin/env bash
# CUDA check of the embedded tiny models on a lent GPU machine (the `device` tool), as one prepared script.
#
#   tools/device_check.sh prepare     # here: copy fairseq (pure Python) + the staged models into .devcarry/
#   run(command="tools/device_check.sh run", carry=[".devcarry"])       # there: cuda then cpu, JSON in $OUT
#
# The device image has torch (CUDA), pytest, pytest-benchmark, numpy, pyyaml, psutil but no fairseq and
# no network: fairseq's Python files travel, its cp311 extensions do not (they are not on these paths),
# and bitarray is built there from its sdist. Report: runtime synchronised, device_peak_mib > 0.
set -u
cd "$(dirname "$0")/.."
case "${1:-}" in
prepare)
  set -e
  SP=$(.venv/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  rm -rf .devcarry && mkdir -p .devcarry/site .devcarry/wheels
  for p in fairseq hydra omegaconf antlr4 memory_profiler.py; do cp -r "$SP/$p" .devcarry/site/; done
  rm -rf .devcarry/site/fairseq/examples
  find .devcarry -name __pycache__ -type d -prune -exec rm -rf {} + ; find .devcarry -name "*.so" -delete
  .venv/bin/pip download -q --no-deps --no-binary :all: -d .devcarry/wheels \
      "bitarray==$(.venv/bin/python -c 'import bitarray; print(bitarray.__version__)')"
  cp -r "$(.venv/bin/python -c 'from pytest_s2st.tiny.fairseq_tiny import default_configs; print(default_configs()[0].parent.parent)')" .devcarry/fs
  du -sh .devcarry ;;
run)
  export PYTHONPATH="$PWD/.devcarry/site:$PWD" PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
  PY=${PY:-python3}; OUT=${OUT:-/tmp/s2st-out}; mkdir -p "$OUT"
  $PY -c "import bitarray" 2>/dev/null || $PY -m pip install -q --no-index --no-build-isolation .devcarry/wheels/*.tar.gz
  $PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
  demo=$($PY -c "from pathlib import Path; from pytest_s2st.demo import stage_demo; print(stage_demo(Path('/tmp/s2st-demo')))")
  args="${PLUGIN_ARGS--p pytest_s2st.plugin} -p no:cacheprovider -q --s2st-config $demo"
  for t in S2T MT TTS S2S S2UT 2StageS2ST 3StageS2ST; do args="$args --s2st-config .devcarry/fs/configs/$t.yaml"; done
  for dev in ${DEVICES:-cuda cpu}; do
    echo "=== --s2st-device $dev"
    timeout 240 $PY -m pytest benchmarks/test_inference.py $args --s2st-device "$dev" --benchmark-json "$OUT/$dev.json" 2>&1 | tail -25
  done
  $PY - "$OUT" <<'PY'
import json, sys, pathlib
for f in sorted(pathlib.Path(sys.argv[1]).glob("*.json")):
    for b in json.loads(f.read_text())["benchmarks"]:
        s = b["extra_info"]["s2st"]; m = s["metrics"]
        print(f.stem, b["name"], s["device"], "runtime_s=%.6f" % m["runtime_s"]["value"],
              "device_peak_mib=%s" % m["device_peak_mib"]["value"], "flops=%s" % m["flops"]["value"])
PY
  ;;
*) echo "usage: $0 prepare|run" >&2; exit 2 ;;
esac
