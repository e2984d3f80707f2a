#!/usr/bin/env bash
# One prepared run of every GPU check, results in one folder (under 10 minutes: the step
# limits add up to 560 s, so it fits one 600 s device call).
#   bash benchmarks/gpu_check.sh [OUT_DIR]     (needs a CUDA build of torch and a GPU)
# Steps, most important first, each with its own time limit and its own file, so a run
# cut short still brings back what it finished:
#   machine.txt        nvidia-smi, torch and CUDA versions
#   cuda_tests.txt     the CUDA tests (tests/test_cuda.py)
#   sweep-*.txt, profile-*.json
#                      fp16, then fp32 and bf16, at 512x288, 256x144, 1024x576, batches
#                      1-16 (ms per batch, peak device memory); with channels_last last
#   efficiency.txt     live pipeline / bare model, batches 1, 4, 8, fp16 512x288, sessions
#                      overloaded (whole windows shipped)
#   efficiency-steady.txt  the same at batches 1 and 8 with sessions just above the
#                      device's rate (about one new frame per window)
#   graphs.txt         the live worker with and without --cuda-graphs, fixed batches 1 and 4
#   arithmetic.txt     TFLOPS and GB/s each swept point implies (PEAK_TFLOPS / PEAK_GBS:
#                      the device's peaks, e.g. PEAK_TFLOPS=fp16=989,bf16=989,fp32=67
#                      PEAK_GBS=4800 for an H200 SXM)
#   scheduler.txt      µs per policy decision and per batch assembly
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-gpu-results}
mkdir -p "$out"
export PYTHONPATH=$PWD/app PYTHONUNBUFFERED=1
py=${PYTHON:-python3}
step() {  # step SECONDS FILE COMMAND...: run with a time limit, tee into FILE
  local limit=$1 file=$2; shift 2
  echo "== $file: $*" | tee "$out/$file"
  timeout "$limit" "$@" 2>&1 | tee -a "$out/$file"
  local rc=${PIPESTATUS[0]}
  [ "$rc" = 0 ] || echo "== exit status $rc" | tee -a "$out/$file"
}
{
  date -u; nvidia-smi
  $py -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0))"
} > "$out/machine.txt" 2>&1
cat "$out/machine.txt"
step 70 cuda_tests.txt $py -m pytest -m cuda tests/test_cuda.py -q
common=(--device cuda:0 --resolution 512x288,256x144,1024x576 --batch 1,2,3,4,8,16
        --warmup 10 --repeat 30 --rounds 3)
step 60 sweep-fp16.txt $py -m batchscope sweep --precision fp16 "${common[@]}" --name gpu-fp16 \
    --out "$out/profile-fp16.json"
step 80 sweep-fp32-bf16.txt $py -m batchscope sweep --precision fp32,bf16 "${common[@]}" \
    --name gpu-fp32-bf16 --out "$out/profile-fp32-bf16.json"
step 90 efficiency.txt $py benchmarks/pipeline_efficiency.py --device cuda:0 --precision fp16 \
    --resolution 512x288 --batch 1,4,8 --seconds 3 --rounds 1
step 70 efficiency-steady.txt $py benchmarks/pipeline_efficiency.py --device cuda:0 --precision fp16 \
    --resolution 512x288 --batch 1,8 --seconds 3 --rounds 1 --steady
graphs() {
  for b in 1 4; do
    for g in "" --cuda-graphs; do
      echo "-- fixed batch $b ${g:-eager}"
      $py -m batchscope run synthetic --device cuda:0 --precision fp16 --resolution 512x288 \
          --sessions $((2 * b)) --fps 240 --policy fixed --batch $b --max-delay-ms 50 \
          --duration 6 --warmup 2 --quiet $g
    done
  done
}
export -f graphs; export py
step 70 graphs.txt bash -c graphs
peaks=()
[ -n "${PEAK_TFLOPS:-}" ] && peaks+=(--peak-tflops "$PEAK_TFLOPS")
[ -n "${PEAK_GBS:-}" ] && peaks+=(--peak-gbs "$PEAK_GBS")
step 20 arithmetic.txt $py benchmarks/model_cost.py \
    --profile "$out/profile-fp16.json,$out/profile-fp32-bf16.json,laptop-8gb,server-24gb" "${peaks[@]}"
step 20 scheduler.txt $py benchmarks/scheduler_cost.py
# last: the longest sweep; if its limit cuts it, its per-point lines are still in the file
step 80 sweep-channels-last.txt $py -m batchscope sweep --precision fp16,fp32,bf16 "${common[@]}" \
    --channels-last --name gpu-cl --out "$out/profile-channels-last.json"
echo "results in $out"
