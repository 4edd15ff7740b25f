#!/usr/bin/env bash
# One prepared run for a CUDA machine (docs/benchmarks.md, "GPU"): install, run the test suite on CUDA,
# then the engine benchmark on the device. Results go to ${OUT:-bench-out}/ (JSON lines + logs).
#
#   bash bench/gpu.sh            # from the repository root, on a machine with an NVIDIA GPU
#
# Budget: ~3 min install, ~5 min tests, ~5 min benchmarks on an H200.
set -euo pipefail
OUT=${OUT:-bench-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
python3 -m pip install -q -e ".[all,test]" 2>&1 | tail -2
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())" \
  | tee -a "$OUT/gpu.txt"
# the whole suite with CUDA visible: the CUDA variants of the tests run instead of skipping
timeout 900 python3 -m pytest -q -x 2>&1 | tail -5 | tee "$OUT/tests.txt"
for method in greedy modified_beam; do
  timeout 600 python3 -m streamd bench engine --device cuda --method "$method" --beam 4 \
    --streams 1,64,512,2048 --seconds 10 --json | tee "$OUT/bench_cuda_${method}.json"
done
