#!/usr/bin/env bash
# Validate and time the CUDA path of the packed INT4 / INT8 kernels (icml26/csrc/cuda/quant_cuda.cu)
# on a machine with an NVIDIA GPU, a CUDA build of torch and nvcc. One short run (a few minutes:
# the first JIT build of the kernel takes ~1-2 min):
#   1. what is there: GPU, driver, torch / CUDA versions, nvcc;
#   2. the kernel tests, GPU ones included: parity with the pure-torch twin (icml26/ops/_ref/quant.py)
#      through the torch op and through the ctypes launcher, fp32 / fp16 / bf16, INT4 / INT8, M = 1..16,
#      and a PackedLinear on CUDA against the same layer on CPU;
#   3. benchmarks/quantize.py --device cuda: GEMV / small-M GEMM us vs torch FP16 / FP32 matmul and
#      the bandwidth bound, then SmolLM2-135M greedy decode with the packed INT4 model on the GPU.
# Usage: bash benchmarks/quantize_cuda.sh          (PY=/path/to/python to choose the interpreter)
set -uo pipefail
cd "$(dirname "$0")/.."
if [ -z "${PY:-}" ]; then
  # the first of the repo's venv / python3 whose torch is a CUDA build, else the first with torch at all
  for cand in .venv/bin/python python3; do
    if "$cand" -c "import torch,sys; sys.exit(torch.version.cuda is None)" 2>/dev/null; then PY=$cand; break; fi
  done
  if [ -z "${PY:-}" ]; then
    for cand in .venv/bin/python python3; do
      if "$cand" -c "import torch" 2>/dev/null; then PY=$cand; break; fi
    done
  fi
  PY=${PY:-python3}
fi
echo "python: $PY"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
echo "== 1. environment"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "nvidia-smi: not found"
"$PY" -c "import torch; print('torch', torch.__version__, '| torch CUDA', torch.version.cuda, '| device', torch.cuda.get_device_name() if torch.cuda.is_available() else None)"
"$PY" -c "from icml26.ops import quant_cuda as q; print('nvcc', q.nvcc())"
command -v nvcc >/dev/null && nvcc --version | tail -2
echo "== 2. tests (GPU ones included)"
"$PY" -m pytest -q -m "not slow" -p no:cacheprovider tests/ops/test_quant_cuda.py
rc=$?
"$PY" -c "from icml26.ops import quant_cuda as q; print('kernel backend:', q.backend(), '|', q.why())"
echo "== 3. benchmark"
"$PY" benchmarks/quantize.py --device cuda
exit $rc
