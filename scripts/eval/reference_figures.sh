#!/usr/bin/env bash
# Rebuild the authors' threshold steps, BFCL tables and figures from reference/dara_authors
# into OUT (default outputs/reference). Usage: scripts/eval/reference_figures.sh [REF_DIR] [OUT]
set -euo pipefail
cd "$(dirname "$0")/../.."
REF=${1:-reference/dara_authors}
OUT=${2:-outputs/reference}
PY=${PY:-.venv/bin/python}
mkdir -p "$OUT"
CURVES=$REF/reference/training_dynamics.csv
PAPER=$REF/paper_bfcl_v4_20260920

echo "== threshold steps: median over seeds of the training format reward reaches 0.8"
$PY -m results thresholds "$CURVES" --metric train_format --threshold 0.8 --group-by model_size --format md \
    | tee "$OUT/thresholds_train_format_0.8.md"
$PY -m results thresholds "$CURVES" --metric train_format --threshold 0.8 --group-by model_size \
    --out "$OUT/thresholds_train_format_0.8.csv"
echo "== threshold steps: validation format (every 10 steps) reaches 0.8"
$PY -m results thresholds "$CURVES" --metric val_format --threshold 0.8 --group-by model_size --format md \
    | tee "$OUT/thresholds_val_format_0.8.md"

METRICS=live_accuracy,non_live_accuracy,multi_turn_accuracy,average_accuracy,average_format
echo "== Table 1 (BFCL v4, step 100) rebuilt from the per-run file, the paper's numbers beside"
$PY -m results table "$PAPER/final_per_run.csv" --group-by model_size,method,step --metrics $METRICS \
    --drop-if "retained==False" --paper "$PAPER/final_method_results.csv" | tee "$OUT/table1.md"
$PY -m results table "$PAPER/final_per_run.csv" --group-by model_size,method,step --metrics $METRICS \
    --drop-if "retained==False" --format latex --out "$OUT/table1.tex"
$PY -m results table "$PAPER/final_per_run.csv" --group-by model_size,method,step --metrics $METRICS \
    --drop-if "retained==False" --format csv --out "$OUT/table1.csv"
echo "== selected seeds (step-100 validation format >= 0.8) from per_model.csv"
$PY -m results table "$REF/reference/per_model.csv" --group-by model_size,method \
    --metrics v4_live,v4_non_live,v4_multi_turn,v4_average,v4_average_format \
    --attach "$CURVES" val_format@100 --drop-if "val_format@100<0.8" \
    --paper "$REF/reference/selected_seeds.csv" | tee "$OUT/selected_seeds.md"

echo "== figures"
$PY -m results plot curves "$CURVES" --metrics train_format,val_format,train_correctness --group-by model_size \
    --threshold train_format=0.8 --threshold val_format=0.8 --out "$OUT/training_curves"
$PY -m results plot channels "$CURVES" --group-by model_size --out "$OUT/dara_channels"
$PY -m results plot checkpoints "$PAPER/dynamics_export/plot_data.csv" \
    --metrics average_accuracy,average_format,multi_turn_format --group-by model_size --out "$OUT/bfcl_checkpoints"
