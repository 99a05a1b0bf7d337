#!/usr/bin/env bash
# The GPU work, run on a lent GPU machine that has torch but not mmtok's other packages (see README, "GPU figures"):
#   - carried wheels in .whl/ (open_clip, vector-quantize-pytorch and their pure-Python needs) go to /tmp/site;
#   - the source tree becomes the mmtok package through links (models/ budgets/ cli/ eval/ under mmtok/);
#   - CUDA tests; training of the two backbones (top-2 and dynamic k) on the GPU from the carried token cache
#     (.cache/backbone-data); bench_moe (bf16, two token counts) and bench_vq on the GPU.
# Everything it makes is packed into $OUT/device.tar (weights, logs, benchmark JSON); the console log is $OUT/log.txt.
set -uo pipefail
OUT=${OUT:-/tmp/mmtok-device}
WORK=/tmp/mmtok-work
mkdir -p "$OUT" "$WORK"
exec > >(tee "$OUT/log.txt") 2>&1
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site
fi
for d in models budgets cli eval; do ln -sfn "../$d" "mmtok/$d"; done
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
MMTOK="python3 -c 'from mmtok.cli.main import app; app()'"
pack() { rm -f "$WORK"/*/train_state.safetensors; tar -cf "$OUT/device.tar" -C "$WORK" .; }  # after each step
python3 -m pytest -q -p no:cacheprovider -o addopts="" tests/test_moe.py -k "gpu" 2>&1 | tail -3
python3 -m mmtok.eval.bench.moe --device cuda --repeats 30 --json "$WORK/bench_moe_cuda.json"
python3 -m mmtok.eval.bench.moe --device cuda --tokens 65536 --repeats 20 --json "$WORK/bench_moe_cuda_64k.json"
pack
for cfg in backbone-tiny backbone-tiny-dynk; do  # into each config's own out folder, as on CPU
  eval "$MMTOK" train backbone "models/configs/train/$cfg.toml" --device cuda | tr '\r' '\n' | tail -2
  cp -r models/weights/backbone-tiny .cache/ablation/backbone-tiny-dynk "$WORK/" 2>/dev/null
  pack
done
timeout 200 python3 -m mmtok.eval.bench.vq --device cuda --repeats 3 --workers 8 --json "$WORK/bench_vq_cuda.json"
pack
