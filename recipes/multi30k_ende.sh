#!/usr/bin/env bash
# Real translation on 2 CPU cores: transformer_tiny on Multi30k English -> German.
#
#   bash recipes/multi30k_ende.sh [OUT_DIR] [MULTI30K_DIR]
#
# MULTI30K_DIR holds (or receives, downloaded) train|val|test_2016_flickr.{en,de}.gz;
# default ../shared/data/multi30k when it exists. TRAIN_STEPS (default 4000) bounds the run;
# rerunning resumes from the last checkpoint. Decodes test_2016 with beam 4 / alpha 0.6 and
# prints BLEU (sacrebleu) against the raw reference.
set -euo pipefail
OUT=${1:-runs/multi30k_ende}
RAW=${2:-$( [ -d ../shared/data/multi30k ] && echo ../shared/data/multi30k || echo "$OUT/raw" )}
STEPS=${TRAIN_STEPS:-4000}

t2t-datagen --problem=multi30k_ende --data_dir="$OUT/data" --tmp_dir="$RAW"
t2t-trainer --problem=multi30k_ende --hparams_set=transformer_tiny \
  --data_dir="$OUT/data" --output_dir="$OUT/train" --train_steps="$STEPS" --eval_every=1000
t2t-decoder --problem=multi30k_ende --data_dir="$OUT/data" --output_dir="$OUT/train" \
  --decode_split=test --decode_to_file="$OUT/test_2016.de" --overwrite \
  --decode_hparams="beam_size=4,alpha=0.6,extra_length=50"
