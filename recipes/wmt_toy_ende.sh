#!/usr/bin/env bash
# The paper's WMT14 en-de pipeline end to end at toy scale, on news text, on 2 CPU cores.
#
#   bash recipes/wmt_toy_ende.sh [OUT_DIR] [WMT_DIR]
#
# WMT_DIR (default ../shared/data/wmt) holds opennmt_toy_ende/{src,tgt}-train.txt.gz (10k
# Moses-tokenized pairs from WMT), newstest2013.{en,de} (dev) and newstest2014.en-de.{en,de}
# (test). A shared BPE like the paper's 37k one, scaled down to VOCAB_SIZE (8000), then
# transformer_tiny for TRAIN_MINUTES (20), checkpoint averaging, beam 4 / alpha 0.6 / +50 on all
# of newstest2014, and BLEU both ways: sacreBLEU, and the paper's tokenized, compound-split
# BLEU. 10k pairs cannot translate news: the point is that every stage runs on real WMT data.
# TEST_LINES=N (smoke runs) decodes and scores only the first N lines of newstest2014.
set -euo pipefail
# One block, read whole before it runs: editing or updating this file while a run is in
# progress (a git pull during an hour of training) cannot change what that run does next.
{
OUT=${1:-runs/wmt_toy_ende}
WMT=${2:-../shared/data/wmt}
MINUTES=${TRAIN_MINUTES:-20}
STEPS=${TRAIN_STEPS:-100000}
SAVE=${SAVE_STEPS:-500}
AVG=${AVERAGE_LAST_N:-5}
# The toy corpus is Moses-tokenized (with &apos; escapes); newstest is raw text. Detokenize it
# once (sacremoses), so the model learns to write raw text like the references.
mkdir -p "$OUT/raw"
for side in src:en tgt:de; do
  [ -s "$OUT/raw/train.${side#*:}" ] || python -c '
import gzip, sys
from sacremoses import MosesDetokenizer
detok = MosesDetokenizer(lang=sys.argv[1])
with gzip.open(sys.argv[2], "rt", encoding="utf-8") as f, open(sys.argv[3] + ".part", "w") as out:
  for line in f:
    out.write(detok.detokenize(line.split()) + "\n")
' "${side#*:}" "$WMT/opennmt_toy_ende/${side%:*}-train.txt.gz" "$OUT/raw/train.${side#*:}" \
    && mv "$OUT/raw/train.${side#*:}.part" "$OUT/raw/train.${side#*:}"
done
OPTIONS="train_source=$OUT/raw/train.en,train_target=$OUT/raw/train.de"
OPTIONS+=",dev_source=$WMT/newstest2013.en,dev_target=$WMT/newstest2013.de"
OPTIONS+=",test_source=$WMT/newstest2014.en-de.en,test_target=$WMT/newstest2014.en-de.de"
OPTIONS+=",vocab_size=${VOCAB_SIZE:-8000},vocab_type=bpe"

t2t-datagen --problem=translate_files --problem_options="$OPTIONS" --data_dir="$OUT/data"
t2t-trainer --problem=translate_files --data_dir="$OUT/data" --output_dir="$OUT/train" \
  --hparams_set=transformer_tiny --hparams="${HPARAMS:-xla=false,dropout=0.3}" \
  --train_steps="$STEPS" --train_seconds=$((MINUTES * 60)) --save_checkpoints_steps="$SAVE" \
  --eval_every="$SAVE" --eval_decode_lines="${EVAL_DECODE_LINES:-200}" --average_last_n="$AVG"
AVERAGED=$(ls -t "$OUT"/train/averaged/ckpt-*.index | head -1)
TEST_SOURCE=$WMT/newstest2014.en-de.en
TEST_REFERENCE=$WMT/newstest2014.en-de.de
if [ -n "${TEST_LINES:-}" ]; then
  sed -n "1,${TEST_LINES}p" "$TEST_SOURCE" > "$OUT/raw/newstest2014.head.en"
  sed -n "1,${TEST_LINES}p" "$TEST_REFERENCE" > "$OUT/raw/newstest2014.head.de"
  TEST_SOURCE=$OUT/raw/newstest2014.head.en
  TEST_REFERENCE=$OUT/raw/newstest2014.head.de
fi
t2t-decoder --problem=translate_files --data_dir="$OUT/data" --output_dir="$OUT/train" \
  --checkpoint_path="${AVERAGED%.index}" --decode_from_file="$TEST_SOURCE" \
  --decode_to_file="$OUT/newstest2014.de" --overwrite \
  --decode_hparams="beam_size=4,alpha=0.6,extra_length=50"
t2t-bleu --translation="$OUT/newstest2014.de" --reference="$TEST_REFERENCE" \
  --language=de --output_json="$OUT/newstest2014.bleu.json"
t2t-plot-curves --output_dir="wmt_toy_ende=$OUT/train" --png="$OUT/curves.png" --csv --overwrite \
  --title="transformer_tiny, WMT en-de toy (10k pairs)"
exit
}
