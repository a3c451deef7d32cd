#!/usr/bin/env bash
# Table 3 in miniature: every row of the paper's Table 3 trained on Multi30k en-de for the same
# number of steps, two runs at a time (one per core), evaluated on all of dev, reported in
# docs/table3.md (the paper's layout, its figures beside ours, a verdict per claim).
#
#   bash recipes/table3.sh [RUN_DIR] [MULTI30K_DIR]         # 4-5 hours on 2 cores (measured, below)
#   python recipes/table3_sweep.py --run_dir=RUN_DIR --status  # progress, from another shell
#   TABLE3_SMOKE=1 bash recipes/table3.sh                    # 2 rows, 4 steps, a tiny slice
#
# RUN_DIR (default runs/table3, runs/table3_smoke when smoking) gets data/, rows/NAME/ (each
# run's checkpoints, logs, dev decodes and BLEU), results/NAME.json, sweep.json, sweep.log,
# progress.txt. MULTI30K_DIR as in recipes/multi30k.sh. Rerunning the same command resumes:
# finished rows are kept, an interrupted row continues from its last checkpoint.
#
# Environment:
#   TABLE3_STEPS   train steps of every row (default 1000; big, if asked for, 3x as in the paper)
#   TABLE3_ROWS    comma list of miniature sets (default: every row but transformer_table3_big)
#   TABLE3_CORES   cores, one run on each at a time (default 0,1; smoke: the first of them)
#   TABLE3_SEEDS   seeds of the base row (default 3)
#   TABLE3_MAX_ROW_MINUTES  safety bound per run x its estimated cost (default 45)
#   TABLE3_SMOKE=1 the whole chain on 1000 training pairs, 16 dev lines, a 500-piece vocabulary,
#                  decodes to input + 5; its rows run one after the other on the first core
#                  (~1.5 min each on a quiet core: start-up and traces, not steps)
#
# Why 1000 steps: docs/results.md measured transformer_multi30k at 5662 steps in 45:00 on one
# core (2.10 steps/s). recipes/table3_sweep.py's cost model (multiply-adds per token pair) puts
# that model at 0.81 of the miniature base, so the base trains ~1.70 steps/s: 1000 steps ~9.8 min.
# The 21 runs (3 base seeds + 18 rows) cost 21.54 base runs (d_model x2: 2.48, d_ff x2: 1.32,
# N=4: 1.19, ... N=1: 0.61, d_model /2: 0.44); on 2 cores, longest first, 10.8 base runs each =
# 10.8 x 9.8 = 106 min, plus ~90 s per run for start-up, the dev pass, the 1014-line beam decode
# and BLEU (21 x 1.5 / 2 = 16 min) and datagen (~1 min): about 2 h 03 min.
# Measured (2026-11-23, both cores busy with the sweep's two runs): rows take 2-3x that
# estimate, because the two cores slow each other about 2x even when pinned: base 22.8 min of
# training, d_model x2 42.5, d_ff x2 42.2, N=4 28.8. So the whole sweep is about 4-5 hours; run
# it across sessions (it resumes) or with fewer TABLE3_ROWS.
set -euo pipefail
# One block, read whole before it runs: editing or updating this file while a run is in
# progress (a git pull during an hour of training) cannot change what that run does next.
{
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHON=${PYTHON:-python}
SMOKE=${TABLE3_SMOKE:-}
CORES=${TABLE3_CORES:-0,1}
if [ -n "$SMOKE" ]; then
  OUT=${1:-runs/table3_smoke}
  CORES=${CORES%%,*}
  STEPS=${TABLE3_STEPS:-4}
  ROWS=${TABLE3_ROWS:-transformer_table3_base,transformer_table3_h1}
  SEEDS=${TABLE3_SEEDS:-1}
  PROBLEM_OPTIONS=vocab_size=500
  REPORT=(--output="$OUT/table3.md" --figure="$OUT/table3.png")
else
  OUT=${1:-runs/table3}
  STEPS=${TABLE3_STEPS:-1000}
  ROWS=${TABLE3_ROWS:-}
  SEEDS=${TABLE3_SEEDS:-3}
  PROBLEM_OPTIONS=
  REPORT=(--output="$REPO/docs/table3.md" --figure="$REPO/docs/img/table3.png")
fi
SHARED_RAW=$( [ -d ../shared/data/multi30k ] && echo ../shared/data/multi30k || echo "$OUT/raw" )
RAW=${2:-$SHARED_RAW}
FIRST_CORE=${CORES%%,*}
mkdir -p "$OUT"

if [ -n "$SMOKE" ]; then  # A tiny slice of each split, so every stage runs in seconds.
  SLICE="$OUT/raw_slice"
  mkdir -p "$SLICE"
  for spec in train:1000 val:16 test_2016_flickr:16; do
    for lang in en de; do
      name=${spec%%:*}.$lang.gz
      [ -f "$SLICE/$name" ] && continue
      gzip -dc "$RAW/$name" | sed -n "1,${spec##*:}p" | gzip > "$SLICE/$name.incomplete"
      mv "$SLICE/$name.incomplete" "$SLICE/$name"
    done
  done
  RAW=$SLICE
fi

taskset -c "$FIRST_CORE" env TF_NUM_INTRAOP_THREADS=1 TF_NUM_INTEROP_THREADS=1 \
  t2t-datagen --problem=multi30k_ende --data_dir="$OUT/data" --tmp_dir="$RAW" \
  --problem_options="$PROBLEM_OPTIONS"

SWEEP=(--run_dir="$OUT" --steps="$STEPS" --cores="$CORES" --base_seeds="$SEEDS"
       --max_row_minutes="${TABLE3_MAX_ROW_MINUTES:-45}")
[ -n "$ROWS" ] && SWEEP+=(--rows="$ROWS")
# Smoke: an untrained model decodes to the length limit; +5, not +50, keeps that short.
[ -n "$SMOKE" ] && SWEEP+=(--progress_seconds=20
                          --decode_hparams=beam_size=4,alpha=0.6,extra_length=5)
status=0
taskset -c "$CORES" "$PYTHON" "$REPO/recipes/table3_sweep.py" "${SWEEP[@]}" || status=$?
# 2: a setting at fault (one line above), nothing ran; >= 128: stopped or killed (a rerun
# resumes). Either way no page.
{ [ "$status" -eq 2 ] || [ "$status" -ge 128 ]; } && exit "$status"
taskset -c "$FIRST_CORE" "$PYTHON" "$REPO/recipes/table3_report.py" "$OUT" "${REPORT[@]}"
exit "$status"  # Also ends the block before bash reads past it.
}
