#!/usr/bin/env bash
# The GPU figures of bench/README.md, in one pass on a GPU machine that has JAX and PyTorch but
# no TensorFlow (and no keras): what such a machine is lent for, in the order of what matters.
#
#   bash bench/gpu_jax.sh WHEELS BATCHES_TAR STOCK_KERAS OUT [SECONDS]
#
# WHEELS       a folder of wheels installed with --no-deps into a private target: keras, optree,
#              namex, and t2tlite itself (`pip wheel --no-deps -w WHEELS .` on a CPU machine)
# BATCHES_TAR  Multi30k training batches as numpy arrays, as tar.xz of the folder that
#              `t2t-datagen --numpy_batches=DIR --hparams_set=transformer_multi30k_packed` wrote
# STOCK_KERAS  the shared peers' gpu_peers.py (flops.py beside it): the base shape in stock
#              Keras 3 layers on JAX
# OUT          results: bench64.{json,log}, profile.tar.gz, bench32_128.{json,log}, train.log and
#              the run (its model-only checkpoints) as run.tar.gz.part-* (pieces under 16 MiB)
# SECONDS      the whole budget (default 540); each phase gets a share and is cut at its end
# Environment: TRAIN_SECONDS (150; 0 skips phase 3 and BATCHES_TAR may be "-"), TRAIN_STEPS
# (10000), PROFILE_SECONDS (90; 0 skips phase 2); for a dry run on a CPU machine,
# TOKENS_PER_STEP (25000), BENCH_STEPS ("--warmup 5 --steps 20"), PROFILE_ARGS (more flags
# for jax_step_profile.py trace) and TORCH_PYTHON (python3; empty: no torch column).
#
# 1. bench/train_throughput.py --backend jax: transformer_base shape, bf16, ~25k target tokens
#    per step at length 64, beside torch.nn.Transformer under torch.compile and stock Keras;
#    ours also pipelined (steps back to back, one host sync, as t2t-trainer runs; every
#    system's main figure syncs every step, the peers' method).
# 2. bench/jax_step_profile.py trace at length 64: where the step's GPU time goes, as
#    profile.tar.gz (read it with `jax_step_profile.py summarize` where TensorFlow is).
# 3. t2t-trainer --backend=jax from the saved batches (transformer_multi30k_packed: one batch
#    shape, so one compilation), for at most TRAIN_SECONDS (default 150); the run comes back
#    with model-only copies of its checkpoints (the optimizer's moments stay behind) so that
#    t2t-decoder on a CPU machine can choose among them on dev.
# 4. The bench at lengths 32 and 128, in what time is left.
set -uo pipefail
WHEELS=${1:?usage: gpu_jax.sh WHEELS BATCHES_TAR STOCK_KERAS OUT [SECONDS]}
BATCHES_TAR=${2:?}; STOCK_KERAS=${3:?}; OUT=${4:?}; BUDGET=${5:-540}
TRAIN_SECONDS=${TRAIN_SECONDS:-150}
TRAIN_STEPS=${TRAIN_STEPS:-10000}
PROFILE_SECONDS=${PROFILE_SECONDS:-90}
PROFILE_ARGS=${PROFILE_ARGS:-}
TOKENS_PER_STEP=${TOKENS_PER_STEP:-25000}
BENCH_STEPS=${BENCH_STEPS:---warmup 5 --steps 20}
TORCH_PYTHON=${TORCH_PYTHON-python3}
WORK=${WORK:-/tmp/t2tlite_gpu}
mkdir -p "$OUT" "$WORK"
export PYTHONUNBUFFERED=1 KERAS_BACKEND=jax
left() { echo $((BUDGET - SECONDS)); }
say() { echo "[gpu_jax +${SECONDS}s] $*" >&2; }

python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target "$WORK/site" "$WHEELS"/*.whl || { echo "gpu_jax.sh: installing $WHEELS failed" >&2; exit 2; }
export PYTHONPATH=$WORK/site${PYTHONPATH:+:$PYTHONPATH} PATH=$WORK/site/bin:$PATH
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv >&2
python3 -c "import jax, keras; print('jax', jax.__version__, jax.devices(), 'keras', keras.__version__)" \
  >&2 || exit 2
if [ "$TRAIN_SECONDS" -gt 0 ]; then
  (mkdir -p "$WORK/batches" && xz -dc "$BATCHES_TAR" | tar -xf - -C "$WORK/batches") &
  UNPACK=$!
fi

bench() {  # bench LENGTHS NAME SECONDS
  say "bench at lengths $1 (at most $3 s)"
  timeout "$3" python3 bench/train_throughput.py --backend jax --shapes base \
    --dtype mixed_bfloat16 --lengths "$1" --tokens_per_step "$TOKENS_PER_STEP" $BENCH_STEPS \
    --rounds 1 --torch_python "$TORCH_PYTHON" --torch_device cuda --torch_compile --torch_amp bf16 \
    --peak_tflops 989 --stock_keras_script "$STOCK_KERAS" --timeout "$3" --verbose --pipelined \
    --output_json "$OUT/$2.json" > "$OUT/$2.log" 2>&1
  say "bench at lengths $1: exit $?"
  grep -v "^\[ours jax\] step\|^I0000\|^WARNING" "$OUT/$2.log" | tail -n 25
}

bench 64 bench64 $(( $(left) * 45 / 100 ))

if [ "$PROFILE_SECONDS" -gt 0 ]; then
  say "profile at length 64 (at most $PROFILE_SECONDS s)"
  timeout "$PROFILE_SECONDS" python3 bench/jax_step_profile.py trace --out "$WORK/profile" \
    --length 64 --tokens "$TOKENS_PER_STEP" $PROFILE_ARGS > "$WORK/profile.log" 2>&1
  say "profile: exit $?"
  cp "$WORK/profile.log" "$WORK/profile/" 2>/dev/null
  tail -n 1 "$WORK/profile.log"
  (cd "$WORK" && tar -czf "$OUT/profile.tar.gz" profile)
fi

train() {
  wait $UNPACK || { echo "gpu_jax.sh: unpacking $BATCHES_TAR failed" >&2; exit 2; }
  BATCHES=$(dirname "$(find "$WORK/batches" -name batches.json | head -1)")
  RUN=$WORK/run
  say "training from $BATCHES for at most $TRAIN_SECONDS s"
  timeout $((TRAIN_SECONDS + 90)) t2t-trainer --backend=jax --numpy_batches="$BATCHES" \
    --hparams_set=transformer_multi30k_packed --output_dir="$RUN/train" \
    --train_steps="$TRAIN_STEPS" --train_seconds="$TRAIN_SECONDS" --save_checkpoints_steps=1000 \
    --keep_checkpoint_max=50 --average_last_n=3 --eval_every=0 --log_every=500 \
    > "$OUT/train.log" 2>&1
  say "training: exit $?"
  grep -E "step [0-9]+|averaged|stopped|seconds" "$OUT/train.log" | tail -n 12

  # Model-only copies of the last three checkpoints at multiples of 2000 steps (the last one
  # among them), with their own manifests: with averaged/, four candidates to choose on dev.
  python3 - "$RUN/train" "$RUN/slim" <<'EOF'
import glob, os, sys
from t2tlite.training import checkpoint_manifest, npz_checkpoints
run, slim = sys.argv[1:3]
steps = sorted(int(p[:-4].rsplit("-", 1)[1]) for p in glob.glob(os.path.join(run, "ckpt-*.npz")))
for step in [s for s in steps if s > 0 and (s % 2000 == 0 or s == steps[-1])][-3:]:
  arrays = npz_checkpoints.read(os.path.join(run, f"ckpt-{step}"))
  out = npz_checkpoints.write(os.path.join(slim, f"ckpt-{step}"),
                              {k: v for k, v in arrays.items() if k.startswith(npz_checkpoints.MODEL)})
  checkpoint_manifest.write_manifest(out)
  print("model-only copy of step", step, file=sys.stderr)
EOF
  (cd "$RUN" && tar -czf - --exclude='train/ckpt-*' train slim) | split -b 16000k - "$OUT/run.tar.gz.part-"
  ls -la "$OUT" >&2
}
if [ "$TRAIN_SECONDS" -gt 0 ]; then train; else say "TRAIN_SECONDS=0: no training run"; fi

REST=$(( $(left) - 15 ))
if [ "$REST" -gt 120 ]; then bench 32,128 bench32_128 "$REST"; else say "no time left for lengths 32 and 128"; fi
