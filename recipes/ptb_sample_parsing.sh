#!/usr/bin/env bash
# Constituency parsing on CPU: transformer_parsing_tiny on NLTK's Penn Treebank sample.
#
#   bash recipes/ptb_sample_parsing.sh [OUT_DIR] [PTB_DIR]
#
# PTB_DIR holds treebank.zip (or wsj_0001-0199.combined.mrg.gz); default ../shared/data/ptb
# (or $PTB_DIR). Train wsj_0001-0159 (3396 trees), dev wsj_0160-0179 (273), test
# wsj_0180-0199 (245). Targets are whole tree symbols (`(NP`, `)NP`, `XX`: one piece each).
# TRAIN_SECONDS (default 3600) bounds the training's wall time; rerunning resumes from the
# last checkpoint.
# PROBLEM_OPTIONS (default empty: the paper's `XX` targets) goes to t2t-datagen as
# --problem_options, e.g. PROBLEM_OPTIONS=target_words=true writes each word in place of its
# `XX`; the trainer and decoder read it from the data dir, which holds one form only (another
# form needs another OUT_DIR).
# Dev is decoded greedily, under the tree constraint, on 100 sentences every 500 steps
# (eval/parse_f1 in TensorBoard); at the end dev and test are decoded with the paper's
# beam 21 / alpha 0.3 / input + 300 and the tree constraint (the parsing problems' default)
# and scored with EVALB's COLLINS.prm rules. The default xla=auto trains uncompiled on CPU and
# decodes with the XLA-compiled search, by far the faster one for beam 21 to input + 300.
set -euo pipefail
OUT=${1:-runs/ptb_sample}
PTB=${2:-${PTB_DIR:-../shared/data/ptb}}
SECONDS_BUDGET=${TRAIN_SECONDS:-3600}
OPTIONS=${PROBLEM_OPTIONS:-}

t2t-datagen --problem=ptb_sample --data_dir="$OUT/data" --tmp_dir="$PTB" \
  --problem_options="$OPTIONS"
t2t-trainer --problem=ptb_sample --hparams_set=transformer_parsing_tiny \
  --data_dir="$OUT/data" --output_dir="$OUT/train" --train_steps=1000000 \
  --train_seconds="$SECONDS_BUDGET" --eval_every=500 --save_checkpoints_steps=500 \
  --eval_decode_lines=100 --eval_decode_hparams="beam_size=1"
for split in dev test; do
  t2t-decoder --problem=ptb_sample --data_dir="$OUT/data" --output_dir="$OUT/train" \
    --decode_split=$split --decode_to_file="$OUT/$split.trees" --overwrite
  t2t-parse-eval --gold="$OUT/data/ptb_sample-$split.trees" --test="$OUT/$split.trees" \
    --nosentences --output_json="$OUT/$split.evalb.json" | tee "$OUT/$split.evalb"
done
