#!/usr/bin/env bash
# The laptop figure of the Random Hierarchy Model (README "Other grammars"): a root classifier and an MLM on the RHM
# config rhm-v8-m4-s2-L3 (v = n = 8 symbols and root classes, m = 4 rules per symbol, binary productions, L = 3, grammar
# seed 0, k = 0), each script's laptop preset (d = 64, d' = 256, n_L = L, Adam 1e-3, 12 epochs), one CPU thread, model
# seed 0. P = 2^15 for the root (12,288 steps at batch 32) and 2^17 for the MLM (49,152 steps), the MLM with the
# constant mask rate 0.4 it was measured with (--mask_rate given alone; the paper grammar's laptop preset now falls
# from 0.4 to 0.15, a schedule not measured on the RHM). Then the
# closest-BP_k figures (hf-treelang dynamics: KL to every BP_k, the k_test staircase, argmax and Spearman agreement).
#
#   bash training/rhm_laptop.sh OUT [FIGURES]      e.g. bash training/rhm_laptop.sh /tmp/rhm docs/rhm
set -euo pipefail
OUT=${1:?usage: rhm_laptop.sh OUT [FIGURES]}
FIGURES=${2:-$OUT/figures}
RHM=(--num_symbols 8 --num_rules 4 --arity 2 --depth 3 --cpu_threads 1 --seed 0)
HERE="$(dirname "$0")"
[ -f "$OUT/root/run_complete.json" ] || python "$HERE/run_root.py" "${RHM[@]}" --num_train 32768 --output_dir "$OUT/root"
[ -f "$OUT/mlm/run_complete.json" ] || python "$HERE/run_mlm.py" "${RHM[@]}" --num_train 131072 --mask_rate 0.4 --output_dir "$OUT/mlm"
hf-treelang dynamics "$OUT/root" --out "$FIGURES" --name rhm_root_laptop \
  --title "RHM v=8 m=4 s=2 L=3 (rhm-v8-m4-s2-L3): root classification, P = 2^15, seed 0"
hf-treelang dynamics "$OUT/mlm" --out "$FIGURES" --name rhm_mlm_laptop \
  --title "RHM v=8 m=4 s=2 L=3 (rhm-v8-m4-s2-L3): masked leaf, P = 2^17, seed 0"
