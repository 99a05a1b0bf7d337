#!/usr/bin/env bash
# The GPU checks, run on a lent GPU machine that has torch but not mmtok's other packages (see README, "GPU figures"):
#   - carried wheels in .whl/ (open_clip, vector-quantize-pytorch and their pure-Python needs) go to /tmp/site;
#   - the source tree becomes the mmtok package through links (models/ budgets/ cli/ eval/ under mmtok/);
#   - the CUDA tests, then bench_moe (bf16, two token counts) and bench_vq on the GPU; JSON figures go to $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/mmtok-device}
mkdir -p "$OUT"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site
fi
for d in models budgets cli eval; do ln -sfn "../$d" "mmtok/$d"; done
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
python3 -m pytest -q -p no:cacheprovider -o addopts="" tests/test_moe.py -k "gpu or dispatch" 2>&1 | tail -5
python3 -m mmtok.eval.bench_moe --device cuda --repeats 30 --json "$OUT/bench_moe_cuda.json"
python3 -m mmtok.eval.bench_moe --device cuda --tokens 65536 --repeats 20 --json "$OUT/bench_moe_cuda_64k.json"
python3 -m mmtok.eval.bench_vq --device cuda --repeats 3 --workers 8 --json "$OUT/bench_vq_cuda.json"
