#!/usr/bin/env bash
# One prepared run for a CUDA machine (docs/benchmarks.md, "GPU"): the tests that run on the engine's device
# (CUDA variants run instead of skipping), then the engine benchmark on the device at 1, 64, 256, 512 and 1024
# streams, greedy and modified beam search. Results go to ${OUT:-bench-out}/ (text + JSON lines, one row per
# stream count as soon as it is measured, so a run cut short keeps what it measured).
#
#   bash bench/gpu.sh              # installs the project with all its extras, runs the whole suite
#   bash bench/gpu.sh --offline    # a machine with torch but no package index: the project alone (no deps),
#                                  # the device-side tests only (engine, audio, decode, model, bench)
#
# Budget on an H200: ~2 min tests (offline subset), ~2 min per search method. DEVICE, STREAMS, BENCH_SECONDS,
# SINGLE_SECONDS, TEST_TIMEOUT override the defaults (a CPU dry run: DEVICE=cpu STREAMS=1,4 BENCH_SECONDS=2 ...).
set -uo pipefail
OUT=${OUT:-bench-out}
DEVICE=${DEVICE:-cuda}
STREAMS=${STREAMS:-1,64,256,512,1024}
BENCH_SECONDS=${BENCH_SECONDS:-10}
SINGLE_SECONDS=${SINGLE_SECONDS:-1}  # the unbatched throughput run decodes the N streams one after another
export PYTHONUNBUFFERED=1
mkdir -p "$OUT"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 || true; } | tee "$OUT/gpu.txt"
if [ "${1:-}" = "--offline" ]; then
  python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . 2>&1 | tail -2 \
    || export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
  TESTS=(tests/test_device.py tests/engine tests/audio tests/decode tests/model tests/bench/test_engine.py)
else
  python3 -m pip install -q -e ".[all,test]" 2>&1 | tail -2
  TESTS=()
fi
python3 -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', \
torch.version.cuda, torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU')" | tee -a "$OUT/gpu.txt"
# the CUDA tests first and on their own (short), then the rest with CUDA visible
timeout 120 python3 -m pytest -q -rs -p no:cacheprovider -k "cuda" "${TESTS[@]}" 2>&1 | tail -15 | tee "$OUT/tests_cuda.txt"
timeout "${TEST_TIMEOUT:-900}" python3 -m pytest -q -p no:cacheprovider "${TESTS[@]}" 2>&1 | tail -8 | tee "$OUT/tests.txt"
for method in greedy modified_beam; do
  timeout 200 python3 -m streamd bench engine --device "$DEVICE" --method "$method" --beam 4 \
    --streams "$STREAMS" --seconds "$BENCH_SECONDS" --single-seconds "$SINGLE_SECONDS" --json \
    2>&1 | tee "$OUT/bench_${DEVICE}_${method}.json"
done
