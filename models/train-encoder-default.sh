#!/usr/bin/env bash
# How models/encoder-default was trained (issue 15), on one GPU; the same command runs on
# the CPU, slower (--stop-after and rerunning resume it). First, where the data is:
#   python -m cli build-pairs --data ../shared/data --out .gpu/bundle   # BM25 mining: ~10 min
# then, on the GPU machine (PAIRS: that folder; OUT: where checkpoints and logs go):
#   PAIRS=.gpu/bundle OUT=runs bash models/train-encoder-default.sh NAME:LEXICAL_SHARE ...
# Each NAME:SHARE[:DROP] is one run (runs given together train side by side on the one GPU);
# DROP (comma-separated source names) trains without those sources: an ablation. BUDGET_S
# cuts each run to that many seconds (its schedule with it; --budget-s).
# NAME:1.0 trains a lexical model alone (BM25-imitation batches only), to score beside
# the shipped one: python bench/encoder_dev.py ... concat:models/encoder-default,runs/NAME/last
set -euo pipefail
PAIRS=${PAIRS:-.gpu/bundle}
OUT=${OUT:-runs}
STEPS=${STEPS:-3600}
STOP_AFTER=${STOP_AFTER:-}  # end at this step of the STEPS schedule (the network is then NAME/last);
# a rerun that resumes goes on to the same step, not STOP_AFTER steps further
SEED=${SEED:-0}
BUDGET_S=${BUDGET_S:-}
PY=${PY:-python3}
mkdir -p "$OUT"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv,noheader \
    -lms 1000 > "$OUT/gpu_util.csv" &
  SMI=$!
fi
if [ "$#" -gt 1 ] && [ -f "$PAIRS/sources.json" ]; then  # tokenised once, read by every run
  $PY -c 'import sys; from encoder.dataset import tokenise_bundle
tokenise_bundle(sys.argv[1], sys.argv[2], 192)' "$PAIRS" "$OUT"
fi
pids=()
trap 'kill "${pids[@]}" ${SMI:-} 2>/dev/null; exit 124' TERM INT
for run in "$@"; do
  name=${run%%:*}; rest=${run#*:}; share=${rest%%:*}; drop=""
  [ "$rest" != "$share" ] && drop=${rest#*:}
  stop=()
  [ -n "$BUDGET_S" ] && stop+=(--budget-s "$BUDGET_S")
  if [ -n "$STOP_AFTER" ]; then  # --stop-after counts from where this process starts
    state="$OUT/$name/last/trainer_state.json"
    done_steps=0
    if [ -f "$state" ]; then
      done_steps=$($PY -c 'import json, sys; print(json.load(open(sys.argv[1]))["step"])' "$state")
    fi
    if [ "$done_steps" -ge "$STOP_AFTER" ]; then echo "$name: at step $done_steps already"; continue; fi
    stop+=(--stop-after "$((STOP_AFTER - done_steps))")
  fi
  PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=true $PY -m cli train-encoder --data "$PAIRS" \
    --out "$OUT/$name" --steps "$STEPS" --batch-size 1024 --lr 1e-3 --warmup-steps 300 \
    --max-query-tokens 64 --max-doc-tokens 192 --mine-at 0.3 --mine-every 700 \
    --mine-pairs 50000 --lexical-share "$share" --drop-sources "$drop" --matryoshka 32,64,128 \
    --checkpoint-every 500 --seed "$SEED" "${stop[@]}" --name qkv-encoder-default > "$OUT/$name.log" 2>&1 &
  pids+=($!)
done
status=0
for p in "${pids[@]}"; do wait "$p" || status=1; done
[ -n "${SMI:-}" ] && kill "$SMI" || true
exit $status
