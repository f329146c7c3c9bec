#!/usr/bin/env bash
# The architecture comparison of training/README.md ("The comparison, measured"): every architecture at the laptop
# TreeLang model's parameter count (~200k), on the laptop data (each script's laptop preset: q = 4, l = 4, sigma = 1,
# grammar seed 0, k = 0), 2000 steps of Adam 1e-3 cosine, batch 32, one CPU thread each; Mamba 200 steps (its CPU path,
# the reference kernels' Python loop over the positions, is ~20x slower a step). Then the table and the figure.
#
#   bash training/compare_architectures.sh OUT [SEEDS_OF_THE_MLM_PAIR]     e.g. bash ... /tmp/compare "0 1 2"
set -euo pipefail
OUT=${1:?usage: compare_architectures.sh OUT [SEEDS]}
SEEDS=${2:-"0 1 2"}
cd "$(dirname "$0")"
BERT="hidden_size=64,num_hidden_layers=4,num_attention_heads=1,intermediate_size=256,hidden_dropout_prob=0.0,attention_probs_dropout_prob=0.0"
DISTILBERT="dim=64,n_layers=4,n_heads=1,hidden_dim=256,dropout=0.0,attention_dropout=0.0"
GPT2="n_embd=64,n_layer=4,n_head=1,resid_pdrop=0.0,embd_pdrop=0.0,attn_pdrop=0.0"
LLAMA="hidden_size=64,num_hidden_layers=4,num_attention_heads=1,num_key_value_heads=1,intermediate_size=170"
MAMBA="hidden_size=64,num_hidden_layers=6"

run() {  # task model_type steps seed [overrides] [more flags]
  local task=$1 type=$2 steps=$3 seed=$4 overrides=${5:-} ; shift 5 || shift $#
  local folder="$OUT/$task-$type-s$seed"
  [ -f "$folder/run_complete.json" ] && return
  if [ "$type" = treelang ]; then
    python "run_$task.py" --cpu_threads 1 --max_steps "$steps" --seed "$seed" --output_dir "$folder" "$@"
  else
    python "run_$task.py" --cpu_threads 1 --max_steps "$steps" --seed "$seed" --model_type "$type" \
      --config_overrides "$overrides" --output_dir "$folder" "$@"
  fi
}

# The MLM rows keep the constant mask rate 0.4 they were measured with (--mask_rate given alone; the laptop preset's
# rate now falls to 0.15 over a run's steps, here 2000).
RATE=(--mask_rate 0.4)
for seed in $SEEDS; do run mlm treelang 2000 "$seed" "" "${RATE[@]}"; run mlm bert 2000 "$seed" "$BERT" "${RATE[@]}"; done
run mlm roberta 2000 0 "$BERT" "${RATE[@]}"; run mlm distilbert 2000 0 "$DISTILBERT" "${RATE[@]}"
run clm treelang 2000 0; run clm gpt2 2000 0 "$GPT2"; run clm llama 2000 0 "$LLAMA"
run clm mamba 200 0 "$MAMBA" --num_evaluations 10
run root treelang 2000 0; run root bert 2000 0 "$BERT"; run root gpt2 2000 0 "$GPT2"; run root llama 2000 0 "$LLAMA"
run root mamba 200 0 "$MAMBA" --num_evaluations 10
hf-treelang compare "$OUT"/mlm-* "$OUT"/clm-* "$OUT"/root-* --out "$OUT/compare" \
  --title "Architectures against the exact BP oracle (laptop data, ~200k parameters)"
