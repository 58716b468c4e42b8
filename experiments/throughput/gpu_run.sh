#!/usr/bin/env bash
# The whole GPU measurement on one H200 in about 8 minutes: Qwen2.5-1.5B (SFT, DPO, GRPO, evaluation
# generation), then SFT at the 0.5B and 7B shapes. CSVs and the printed tables go to $OUT (or ./throughput-out).
# Run from the repository root:  bash experiments/throughput/gpu_run.sh
set -uo pipefail
OUT="${OUT:-throughput-out}"
mkdir -p "$OUT"
PY="${PYTHON:-python}"
BENCH="experiments/throughput/bench.py"
PEAK="${PEAK_TFLOPS:-989}"  # dense bf16 peak of an H100/H200
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
{
  date -u +"date: %Y-%m-%dT%H:%M:%SZ"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  "$PY" - <<'PY'
import importlib.util, torch, transformers, trl
print("torch", torch.__version__, "transformers", transformers.__version__, "trl", trl.__version__)
for m in ("flash_attn", "liger_kernel", "vllm"):
    print(m, "installed" if importlib.util.find_spec(m) else "absent")
PY
} | tee "$OUT/environment.txt"

run() {  # run <name> <time limit s> <bench args...>
  local name=$1 limit=$2
  shift 2
  echo "== $name: $*" | tee "$OUT/$name.txt"
  timeout "$limit" "$PY" "$BENCH" --peak-tflops "$PEAK" --csv "$OUT/$name.csv" "$@" 2>&1 | tee -a "$OUT/$name.txt" \
    | grep -v "Computing reference log probs"
  echo "exit ${PIPESTATUS[0]} ($name)" | tee -a "$OUT/$name.txt"
}

# The issue's target shape: every objective, two interleaved repeats.
run qwen2.5-1.5b 300 --shape qwen2.5-1.5b --repeats 2 --steps 5 --warmup 2 \
  --completion-len 128 --eval-prompts 16 --eval-batch 16 \
  --only "rpbench packed,rpbench padded,trl packing,trl padded,trl padding_free,rpbench precomputed ref,trl precomputed ref,rpbench live ref,trl live ref,rpbench hf,trl hf,rpbench vllm,trl vllm"
# SFT at the other shapes: the best configuration of each framework (7B with activation checkpointing on both).
run qwen2.5-0.5b 70 --shape qwen2.5-0.5b --objectives sft --repeats 2 --steps 5 --warmup 2 \
  --only "rpbench packed,trl packing" --no-generation-figure
run qwen2.5-7b 130 --shape qwen2.5-7b --objectives sft --repeats 2 --steps 4 --warmup 2 --checkpointing \
  --only "rpbench packed,trl packing" --no-generation-figure
