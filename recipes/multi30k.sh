#!/usr/bin/env bash
# Multi30k English -> German or French on 2 CPU cores, time-bounded, as in docs/results.md.
#
#   bash recipes/multi30k.sh de|fr [OUT_DIR] [MULTI30K_DIR]
#
# MULTI30K_DIR holds (or receives, downloaded) {train,val,test_2016_flickr}.{en,de,fr}.gz;
# default ../shared/data/multi30k when it exists. Trains HPARAMS_SET (default
# transformer_multi30k, sized for one core; transformer_multi30k_wide wants both) in DTYPE (by
# default mixed_bfloat16 on a CPU with bfloat16 units, else float32) for TRAIN_MINUTES
# (default 60) of wall time (TRAIN_STEPS, default 100000, is only an upper bound), checkpointing
# every SAVE_STEPS (500), decoding 300 dev sentences at each evaluation (dev BLEU curve), then
# averages the last AVERAGE_LAST_N (3) checkpoints; AVERAGE_BEST_N=N also averages the N
# checkpoints best by dev AVERAGE_BEST_BY (perplexity, on all of val), kept as training goes
# (t2t-trainer --keep_best --average_best_n; not the paper: for runs that over-fit before the
# hour ends, whose last checkpoints sit past their best), and dev chooses between the two
# averages (recipes/choose_average.py: the one whose best grid point below scores higher; the
# last N, the paper's, wins a tie; two averages of the same steps are decoded once);
# DECODE_LAST_CHECKPOINT=1 adds the last checkpoint alone as one more candidate, listed last
# (for a run whose rate decays to zero by its end: HPARAMS=...,learning_rate_decay_steps=N
# with TRAIN_STEPS); DECODE_WITH_LAST=1 adds each average decoded together with the run's last
# checkpoint as one ensemble, listed after every single model (one model only: ENSEMBLE=1;
# docs/results.md, twenty-second round). Beam size and alpha are chosen on the whole dev set
# (val, 1014 lines), as the paper chose its beam 4 / alpha 0.6 on its dev set: each beam of
# DECODE_BEAMS (4) with each alpha of DECODE_ALPHAS (0.6,0.8,...,1.6; the paper's 0.6 wins
# ties), +50 as in the paper (recipes/choose_decode.py; DECODE_ALPHAS=0.6
# DECODE_EXTEND_ALPHAS=0 keeps the paper's setting). A best alpha at the grid's edge is
# followed up to DECODE_EXTEND_ALPHAS (2) steps further while it keeps winning.
# DECODE_EXTRA_LENGTHS=50,20,10 adds the longest output (source + N tokens) to the grid, the
# paper's 50 first: at large alphas a few decodes run on, repeating phrases, towards +50
# (recipes/choose_decode.py --extra_lengths).
# With the winner it decodes test_2016_flickr once and scores it: sacreBLEU (cased,
# detokenized) and the lowercased Moses-tokenized BLEU that Multi30k papers publish.
# Rerunning resumes from the last checkpoint (and from the dev points already scored).
# Writes OUT_DIR/{dev_choice.AVERAGE_DIR.ckpt-N.json (one per candidate average; with the last
# checkpoint: dev_choice.AVERAGE_DIR.ckpt-N+train.ckpt-M.json), average_choice.json,
# test_2016.LANG, test_2016.bleu.json, curves.png, curves.*.csv}.
# TEST_LINES=N and DEV_LINES=N (smoke runs) decode and score only the first N test and dev
# sentences; EVAL_STEPS=N scores only the first N dev batches at each evaluation (default:
# all of dev). PROBLEM_OPTIONS goes to t2t-datagen (e.g. lowercase=true: train and
# score in lowercase, as Multi30k's published systems; the sacreBLEU of test_2016.bleu.json is
# then against the cased reference, so read its lowercased BLEU).
# ENSEMBLE=N (default 1) trains N models at once, seeds 1..N, each pinned to one core
# (OUT_DIR/train.1, ...; their logs on stderr, each line prefixed), and decodes with all of
# them as one ensemble (t2t-decoder with several runs: the mean of their next-token
# distributions): the candidates dev chooses between are then the members' last N, and their
# best N, decoded together.
# BACKEND=jax trains under JAX (t2t-trainer --backend=jax; dev is not decoded during training,
# so no dev BLEU curve); averaging, decoding and scoring are the same TensorFlow commands.
set -euo pipefail
# One block, read whole before it runs: editing or updating this file while a run is in
# progress (a git pull during an hour of training) cannot change what that run does next.
{
LANG_TGT=${1:?usage: multi30k.sh de|fr [OUT_DIR] [MULTI30K_DIR]}
OUT=${2:-runs/multi30k_en${LANG_TGT}}
RAW=${3:-$( [ -d ../shared/data/multi30k ] && echo ../shared/data/multi30k || echo "$OUT/raw" )}
MINUTES=${TRAIN_MINUTES:-60}
STEPS=${TRAIN_STEPS:-100000}
SAVE=${SAVE_STEPS:-500}
AVG=${AVERAGE_LAST_N:-3}
BEST_N=${AVERAGE_BEST_N:-0}
BEST_FLAGS=()
MEMBERS=${ENSEMBLE:-1}
TRAIN_DIRS=("$OUT/train")
if [ "$MEMBERS" != 1 ]; then
  TRAIN_DIRS=()
  for ((i = 1; i <= MEMBERS; i++)); do TRAIN_DIRS+=("$OUT/train.$i"); done
fi
RUNS=$(IFS=,; echo "${TRAIN_DIRS[*]}")  # t2t-decoder decodes several runs as one ensemble.
if [ "${DECODE_WITH_LAST:-0}" != 0 ] && [ "$MEMBERS" != 1 ]; then  # Before the hour, not after.
  echo "multi30k.sh: error: DECODE_WITH_LAST=1 pairs one model's averages with its last" \
    "checkpoint; ENSEMBLE=$MEMBERS trains several" >&2
  exit 2
fi
# Each candidate average: one directory per member, comma-separated (one for a single model).
AVG_KINDS=(averaged)  # The paper's first: it wins a tie on dev.
if [ "$BEST_N" != 0 ]; then
  BEST_FLAGS=(--keep_best="${AVERAGE_BEST_BY:-perplexity}" --average_best_n="$BEST_N")
  AVG_KINDS+=(averaged_best)
fi
AVG_DIRS=()
for KIND in "${AVG_KINDS[@]}"; do
  AVG_DIRS+=("$(IFS=,; echo "${TRAIN_DIRS[*]/%//$KIND}")")
done
PROBLEM=multi30k_en${LANG_TGT}
HPARAMS_SET=${HPARAMS_SET:-transformer_multi30k}
# The fastest dtype of this CPU: mixed_bfloat16 where it has bfloat16 units (AVX512-BF16 or
# AMX-BF16: 1.75x float32 on the base step, bench/README.md), else float32. DTYPE=float32
# keeps float32 anywhere; a dtype in HPARAMS wins over both. A run is resumed in the dtype
# it started in (the trainer refuses other hparams in its directory): pass that DTYPE.
DTYPE=${DTYPE:-$(bash "$(dirname "$0")/cpu_dtype.sh")}

t2t-datagen --problem=$PROBLEM --data_dir="$OUT/data" --tmp_dir="$RAW" \
  --problem_options="${PROBLEM_OPTIONS:-}"
trainer_flags() {  # trainer_flags RUN_DIR SEED: t2t-trainer's flags for one run, in FLAGS.
  FLAGS=(--backend="${BACKEND:-tensorflow}" --problem=$PROBLEM --hparams_set="$HPARAMS_SET"
    --hparams="dtype=$DTYPE,${HPARAMS:-xla=false}" --data_dir="$OUT/data" --output_dir="$1"
    --random_seed="$2" --train_steps="$STEPS" --train_seconds=$((MINUTES * 60))
    --save_checkpoints_steps="$SAVE" --eval_every="$SAVE"
    --eval_decode_lines="${EVAL_DECODE_LINES:-300}" --eval_steps="${EVAL_STEPS:-0}"
    --keep_checkpoint_max=20
    --average_last_n="$AVG" ${BEST_FLAGS[@]+"${BEST_FLAGS[@]}"})
}
if [ "$MEMBERS" = 1 ]; then
  trainer_flags "$OUT/train" 1
  t2t-trainer "${FLAGS[@]}"
else  # One core each, round robin over the cores this process may use; all at once.
  CORES=($(${PYTHON:-python} -c 'import os; print(*sorted(os.sched_getaffinity(0)))'))
  PIDS=()
  # Each member is its own process group (setsid), so that one failing, or the recipe
  # stopped, stops every member: none trains on alone.
  trap 'for PID in "${PIDS[@]}"; do kill -- -"$PID" 2> /dev/null || true; done' EXIT
  for i in "${!TRAIN_DIRS[@]}"; do
    trainer_flags "${TRAIN_DIRS[$i]}" $((i + 1))
    setsid taskset -c "${CORES[$((i % ${#CORES[@]}))]}" t2t-trainer "${FLAGS[@]}" \
      2> >(sed -u "s/^/[train.$((i + 1))] /" >&2) &
    PIDS+=($!)
  done
  RUNNING=("${PIDS[@]}")
  while [ ${#RUNNING[@]} != 0 ]; do  # The first member to fail fails the recipe (set -e).
    wait -n -p DONE "${RUNNING[@]}"
    LEFT=()
    for PID in "${RUNNING[@]}"; do [ "$PID" = "$DONE" ] || LEFT+=("$PID"); done
    RUNNING=(${LEFT[@]+"${LEFT[@]}"})
  done
  trap - EXIT
fi
LAST_FLAGS=()
[ "${DECODE_LAST_CHECKPOINT:-0}" = 0 ] || LAST_FLAGS=(--last_checkpoint="$RUNS")
[ "${DECODE_WITH_LAST:-0}" = 0 ] || LAST_FLAGS+=(--ensemble_with_last="$RUNS")
candidate_runs() {  # candidate_runs CHECKPOINTS: the run of each, as t2t-decoder's --output_dir.
  if [ "$MEMBERS" = 1 ] && [ "$1" != "${1%%,*}" ]; then echo "$RUNS,$RUNS"; else echo "$RUNS"; fi
}
LENGTH_FLAGS=(--decode_hparams=extra_length=50)  # The paper's input + 50.
[ -z "${DECODE_EXTRA_LENGTHS:-}" ] || LENGTH_FLAGS=(--extra_lengths="$DECODE_EXTRA_LENGTHS")
CANDIDATES=$(${PYTHON:-python} "$(dirname "$0")/choose_average.py" candidates \
  "${AVG_DIRS[@]}" ${LAST_FLAGS[@]+"${LAST_FLAGS[@]}"})
readarray -t CANDIDATES <<< "$CANDIDATES"
CHOICES=()
for CANDIDATE in "${CANDIDATES[@]}"; do
  FIRST=${CANDIDATE%%,*}  # An ensemble's candidate is named after its first member's,
  NAME=$(basename "$(dirname "$FIRST")").$(basename "$FIRST")
  CANDIDATE_RUNS=$(candidate_runs "$CANDIDATE")
  if [ "$CANDIDATE_RUNS" != "$RUNS" ]; then  # and an average with its run's last checkpoint
    LAST=${CANDIDATE##*,}                     # after both.
    NAME+=+$(basename "$(dirname "$LAST")").$(basename "$LAST")
  fi
  CHOICE=$OUT/dev_choice.$NAME.json
  ${PYTHON:-python} "$(dirname "$0")/choose_decode.py" --problem=$PROBLEM \
    --data_dir="$OUT/data" --output_dir="$CANDIDATE_RUNS" --checkpoint_path="$CANDIDATE" \
    --beam_sizes="${DECODE_BEAMS:-4}" --alphas="${DECODE_ALPHAS:-0.6,0.8,1.0,1.2,1.4,1.6}" \
    "${LENGTH_FLAGS[@]}" --lines="${DEV_LINES:-0}" \
    --extend_alphas="${DECODE_EXTEND_ALPHAS:-2}" --output_json="$CHOICE" > /dev/null
  CHOICES+=("$CHOICE")
done
PICKED=$(${PYTHON:-python} "$(dirname "$0")/choose_average.py" pick "${CHOICES[@]}" \
  --output_json="$OUT/average_choice.json")
CHECKPOINT=${PICKED%%$'\n'*}
DECODE=${PICKED#*$'\n'}
if [ -n "${TEST_LINES:-}" ]; then
  gzip -dc "$RAW/test_2016_flickr.en.gz" | sed -n "1,${TEST_LINES}p" > "$OUT/test_2016.head.en"
  gzip -dc "$RAW/test_2016_flickr.$LANG_TGT.gz" | sed -n "1,${TEST_LINES}p" \
    > "$OUT/test_2016.head.ref.$LANG_TGT"
  SOURCE=(--decode_from_file="$OUT/test_2016.head.en")
  REFERENCE=$OUT/test_2016.head.ref.$LANG_TGT
else
  SOURCE=(--decode_split=test)
  REFERENCE=$RAW/test_2016_flickr.$LANG_TGT.gz
fi
t2t-decoder --problem=$PROBLEM --data_dir="$OUT/data" \
  --output_dir="$(candidate_runs "$CHECKPOINT")" --checkpoint_path="$CHECKPOINT" "${SOURCE[@]}" \
  --decode_to_file="$OUT/test_2016.$LANG_TGT" --overwrite --decode_hparams="$DECODE"
t2t-bleu --translation="$OUT/test_2016.$LANG_TGT" --reference="$REFERENCE" \
  --language="$LANG_TGT" --lowercased_bleu --output_json="$OUT/test_2016.bleu.json"
CURVES=()
for DIR in "${TRAIN_DIRS[@]}"; do CURVES+=("$PROBLEM$([ "$MEMBERS" = 1 ] || echo ".${DIR##*.}")=$DIR"); done
t2t-plot-curves --output_dir="$(IFS=,; echo "${CURVES[*]}")" --png="$OUT/curves.png" --csv --overwrite \
  --title="$HPARAMS_SET, $PROBLEM"
exit
}
