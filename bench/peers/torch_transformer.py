"""PyTorch peer for bench/train_throughput.py: torch.nn.Transformer training step, any shape.

Not part of t2tlite and not one of its dependencies: run it with an interpreter that has torch
(e.g. $T2TLITE_TORCH_PYTHON, `pip install torch==2.13.0`). The driver passes the shape
of the t2tlite hparams set being compared, so the two models are the same network:

  * post-norm encoder/decoder stacks of `torch.nn.TransformerEncoderLayer/DecoderLayer`
    (d_model, heads, d_ff, layers as given), ReLU FFN with biases, LayerNorm with gain and bias;
  * attention projections without biases (t2tlite's `attention_use_bias=False`; pass
    --attn_bias 1 for torch's stock biased projections);
  * dropout: `--dropout` on embeddings+positions and on every residual branch,
    `--attention_dropout` on attention weights, `--relu_dropout` after the FFN ReLU (the driver
    passes t2tlite's values: 0.1 / 0.0 / 0.0 for transformer_base; --all_dropout gives torch's
    stock "one dropout everywhere");
  * one embedding table (shared source/target), scaled by sqrt(d_model), N(0, d^-0.5) init,
    sinusoidal positions, tied to the pre-softmax projection (logits = h @ E^T);
  * label-smoothed cross entropy (torch's `label_smoothing`, 0.1) over all target positions;
  * Adam(beta1 0.9, beta2 0.98, eps 1e-9), constant LR (the schedule costs nothing measurable).

Where it runs: `--device cpu` (default; `--threads` intra-op threads) or `--device cuda` (a GPU
machine, with fused Adam); `--compile 1` wraps the model in `torch.compile` (the first warm-up
steps then include compilation), the configuration the backends issue compares against.

Data: random ids in [2, V), no padding: src [B, S], decoder input [B, T], labels [B, T].
One step = zero_grad, forward, loss, backward, optimizer step, loss.item() (a sync).
Timing: wall-clock per step; the median over --steps timed steps after --warmup steps.
Prints one JSON line on stdout (progress on stderr).
"""
import argparse
import json
import math
import statistics
import sys
import time

import torch
import torch.nn as nn

p = argparse.ArgumentParser()
p.add_argument("--d_model", type=int, default=512)
p.add_argument("--num_heads", type=int, default=8)
p.add_argument("--d_ff", type=int, default=2048)
p.add_argument("--num_encoder_layers", type=int, default=6)
p.add_argument("--num_decoder_layers", type=int, default=6)
p.add_argument("--vocab_size", type=int, default=37000)
p.add_argument("--batch", type=int, default=64)
p.add_argument("--src_len", type=int, default=32)
p.add_argument("--tgt_len", type=int, default=32)
p.add_argument("--dropout", type=float, default=0.1)
p.add_argument("--attention_dropout", type=float, default=0.0)
p.add_argument("--relu_dropout", type=float, default=0.0)
p.add_argument("--all_dropout", action="store_true",
               help="torch's stock behaviour: --dropout on attention weights and after the ReLU too")
p.add_argument("--attn_bias", type=int, default=0)
p.add_argument("--label_smoothing", type=float, default=0.1)
p.add_argument("--warmup", type=int, default=2)
p.add_argument("--steps", type=int, default=5)
p.add_argument("--threads", type=int, default=2)
p.add_argument("--amp", default="none", choices=["none", "bf16"])
p.add_argument("--seed", type=int, default=0)
p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
p.add_argument("--compile", type=int, default=0, help="1 = torch.compile the model")
a = p.parse_args()

torch.set_num_threads(a.threads)
torch.manual_seed(a.seed)
d, V = a.d_model, a.vocab_size
att_drop = a.dropout if a.all_dropout else a.attention_dropout
relu_drop = a.dropout if a.all_dropout else a.relu_dropout


class Model(nn.Module):
  def __init__(self):
    super().__init__()
    self.emb = nn.Embedding(V, d)
    nn.init.normal_(self.emb.weight, 0, d ** -0.5)
    self.tf = nn.Transformer(d_model=d, nhead=a.num_heads, num_encoder_layers=a.num_encoder_layers,
                             num_decoder_layers=a.num_decoder_layers, dim_feedforward=a.d_ff,
                             dropout=a.dropout, batch_first=True, norm_first=False)
    # nn.Transformer appends a final LayerNorm to each stack; the paper's post-norm stack ends
    # with the last sub-layer's own LayerNorm, so drop them (t2tlite has none either).
    self.tf.encoder.norm = None
    self.tf.decoder.norm = None
    mha = lambda: nn.MultiheadAttention(d, a.num_heads, dropout=att_drop, bias=bool(a.attn_bias),
                                        batch_first=True)
    for layer in self.tf.encoder.layers:
      layer.self_attn = mha()
      layer.dropout = nn.Dropout(relu_drop)      # the dropout inside the FFN, after the ReLU
    for layer in self.tf.decoder.layers:
      layer.self_attn = mha()
      layer.multihead_attn = mha()
      layer.dropout = nn.Dropout(relu_drop)
    pe = torch.zeros(1024, d)
    pos = torch.arange(1024).unsqueeze(1).float()
    div = torch.exp(torch.arange(0, d, 2).float() * (-math.log(10000.0) / d))
    pe[:, 0::2] = torch.sin(pos * div)
    pe[:, 1::2] = torch.cos(pos * div)
    self.register_buffer("pe", pe)
    self.drop = nn.Dropout(a.dropout)

  def embed(self, x):
    return self.drop(self.emb(x) * math.sqrt(d) + self.pe[: x.shape[1]])

  def forward(self, src, tgt_in):
    T = tgt_in.shape[1]
    mask = nn.Transformer.generate_square_subsequent_mask(T, device=tgt_in.device)
    h = self.tf(self.embed(src), self.embed(tgt_in), tgt_mask=mask, tgt_is_causal=True)
    return h @ self.emb.weight.t()  # tied pre-softmax projection


m = Model().to(a.device)
m.train()
opt = torch.optim.Adam(m.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9,
                       fused=(a.device == "cuda"))
forward = torch.compile(m) if a.compile else m
lossf = nn.CrossEntropyLoss(label_smoothing=a.label_smoothing)
B, S, T = a.batch, a.src_len, a.tgt_len
g = torch.Generator().manual_seed(1)
src, tgt_in, labels = (torch.randint(2, V, (B, n), generator=g).to(a.device) for n in (S, T, T))

times, warm_times, losses = [], [], []
for i in range(a.warmup + a.steps):
  t0 = time.perf_counter()
  opt.zero_grad(set_to_none=True)
  with torch.autocast(a.device, dtype=torch.bfloat16, enabled=(a.amp == "bf16")):
    out = forward(src, tgt_in)
  loss = lossf(out.float().reshape(-1, V), labels.reshape(-1))
  loss.backward()
  opt.step()
  lv = loss.item()
  dt = time.perf_counter() - t0
  (times if i >= a.warmup else warm_times).append(dt)
  losses.append(lv)
  print(f"[torch] step {i} {dt:.3f}s loss {lv:.3f}", file=sys.stderr, flush=True)

med = statistics.median(times)
print(json.dumps(dict(
    system="torch.nn.Transformer", torch=torch.__version__, threads=torch.get_num_threads(),
    device=torch.cuda.get_device_name() if a.device == "cuda" else "cpu", compiled=bool(a.compile),
    amp=a.amp, params=sum(q.numel() for q in m.parameters()),
    dropout=dict(residual=a.dropout, attention=att_drop, relu=relu_drop), attn_bias=bool(a.attn_bias),
    batch=B, src_len=S, tgt_len=T, warmup=a.warmup, warmup_step_times_s=warm_times, step_times_s=times, median_step_s=med,
    tgt_tok_per_s=B * T / med, first_loss=losses[0], last_loss=losses[-1])))
