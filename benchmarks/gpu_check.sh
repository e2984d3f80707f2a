#!/usr/bin/env bash
# One prepared run of every GPU check, results in one folder.
#   bash benchmarks/gpu_check.sh [OUT_DIR]     (needs a CUDA build of torch and a GPU)
# Runs: the CUDA tests; sweeps fp16/fp32/bf16 at 256x144, 512x288, 1024x576, batches
# 1-16, with and without channels_last; the pipeline-efficiency benchmark.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-gpu-results}
mkdir -p "$out"
export PYTHONPATH=$PWD/app PYTHONUNBUFFERED=1
py=${PYTHON:-python3}
{
  date -u; nvidia-smi; $py -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0))"
} > "$out/machine.txt" 2>&1
$py -m pytest -m cuda tests/test_cuda.py -q 2>&1 | tee "$out/cuda_tests.txt"
common=(--device cuda:0 --precision fp16,fp32,bf16 --resolution 256x144,512x288,1024x576
        --batch 1,2,3,4,8,16 --warmup 10 --repeat 30 --rounds 3)
$py -m batchscope sweep "${common[@]}" --name gpu --out "$out/profile.json" 2>&1 | tee "$out/sweep.txt"
$py -m batchscope sweep "${common[@]}" --channels-last --name gpu-cl \
    --out "$out/profile-channels-last.json" 2>&1 | tee "$out/sweep-channels-last.txt"
$py benchmarks/pipeline_efficiency.py --device cuda:0 --precision fp16 --resolution 512x288 \
    --batch 1,2,4,8 --seconds 8 2>&1 | tee "$out/efficiency.txt"
$py benchmarks/scheduler_cost.py 2>&1 | tee "$out/scheduler.txt"
echo "results in $out"
