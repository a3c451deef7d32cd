"""Model Garden peer for bench/decode_speed.py's real text: its cached beam search on given batches.

Not part of t2tlite and not one of its dependencies: run it with an interpreter that has
tf-models-official 2.20 (e.g. $T2TLITE_TFM_PYTHON; ../shared/peers/README.md sets one up).
The shared peer harness (peerB_tfm.py --mode decode) decodes random ids of one shape only;
this script decodes the very batches t2t-decoder forms from real sentences, so the two
searches see the same sentences, grouped the same way.

Model: `official.nlp.modeling.models.Seq2SeqTransformer` as peerB_tfm.py builds it (pre-norm
encoder/decoder stacks, ReLU FFN, shared embedding of --vocab, beam search with alpha 0.6 and
its key/value cache), with the shape given by flags (the driver passes the shape of the
t2tlite model it compares: d_model, d_ff, heads, layers, vocabulary), randomly initialized.
`eos_id=-1`: no hypothesis ever ends, so each batch decodes to its padded source width +
--extra tokens (Model Garden's maximum decode length), the fixed length the driver also
gives t2tlite.

Input: --batches_json, {"batches": [[[id, ...], ...], ...]}: sentences as piece ids without
EOS, in the driver's batch order. Each batch is padded (id 0) to its longest sentence + 1
and gets EOS (id 1) after each sentence, as t2t-decoder feeds its model.

Timing: the search is one graph for every batch shape (an input signature of unknown batch
and width: Model Garden's beam search runs on dynamic shapes without XLA), traced by one
untimed call on the first batch; then --reps timed passes over all batches; a pass's time is
the wall-clock of every batch's call plus the host copy of its outputs. Prints one JSON line on
stdout (progress on stderr): sentences/s, generated tokens/s, loop steps, the median pass.
"""
import argparse
import json
import statistics
import sys
import time

import numpy as np
import tensorflow as tf
import tf_keras  # noqa: F401 - Model Garden's Keras; imported for its version.
from official.nlp.modeling.models import seq2seq_transformer as s2s

p = argparse.ArgumentParser()
p.add_argument("--batches_json", required=True)
p.add_argument("--d_model", type=int, default=256)
p.add_argument("--d_ff", type=int, default=1024)
p.add_argument("--heads", type=int, default=4)
p.add_argument("--layers", type=int, default=3, help="encoder and decoder layers each")
p.add_argument("--vocab", type=int, default=8000)
p.add_argument("--beam", type=int, default=4)
p.add_argument("--alpha", type=float, default=0.6)
p.add_argument("--extra", type=int, default=10, help="decode length = padded source width + extra")
p.add_argument("--reps", type=int, default=1)
a = p.parse_args()

tf.random.set_seed(0)
kw = dict(num_attention_heads=a.heads, intermediate_size=a.d_ff, activation="relu",
          dropout_rate=0.1, attention_dropout_rate=0.1, intermediate_dropout=0.1, norm_first=True)
model = s2s.Seq2SeqTransformer(
    vocab_size=a.vocab, embedding_width=a.d_model, dropout_rate=0.1,
    encoder_layer=s2s.TransformerEncoder(num_layers=a.layers, **kw),
    decoder_layer=s2s.TransformerDecoder(num_layers=a.layers, **kw),
    beam_size=a.beam, alpha=a.alpha, eos_id=-1, extra_decode_length=a.extra)

with open(a.batches_json) as f:
  groups = json.load(f)["batches"]
batches = []
for sentences in groups:
  width = max(len(s) for s in sentences) + 1
  batch = np.zeros([len(sentences), width], np.int32)
  for row, s in enumerate(sentences):
    batch[row, :len(s)] = s
    batch[row, len(s)] = 1
  batches.append(tf.constant(batch))


@tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)])
def decode(src):
  return model(dict(inputs=src), training=False)["outputs"]


def one_pass():
  tokens = 0
  t0 = time.perf_counter()
  for batch in batches:
    out = decode(batch).numpy()
    tokens += out.shape[0] * out.shape[1]
  return time.perf_counter() - t0, tokens


t0 = time.perf_counter()
decode(batches[0]).numpy()
warm = time.perf_counter() - t0
print(f"[Model Garden text] first call (trace) {warm:.2f}s",
      file=sys.stderr, flush=True)
times = []
for i in range(a.reps):
  dt, tokens = one_pass()
  times.append(dt)
  print(f"[Model Garden text] decode pass {i} {dt:.3f}s", file=sys.stderr, flush=True)
med = statistics.median(times)
n = sum(int(b.shape[0]) for b in batches)
steps = sum(int(b.shape[1]) + a.extra for b in batches)
print(json.dumps(dict(
    system="tf-models-official Seq2SeqTransformer", workload="text_fixed", tf=tf.__version__,
    tf_keras=tf_keras.__version__, beam=a.beam, alpha=a.alpha, extra=a.extra,
    params=int(sum(v.shape.num_elements() for v in model.trainable_variables)),
    sentences=n, batches=len(batches), call_times_s=times, median_s=med, warmup_s=warm,
    sent_per_s=n / med, tok_per_s=tokens / med, generated_tokens=tokens, loop_steps=steps,
    ms_per_loop_step=1000 * med / steps,
    intra_op=tf.config.threading.get_intra_op_parallelism_threads())))
