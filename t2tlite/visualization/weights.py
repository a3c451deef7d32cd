"""One sentence's attention weights, as tokens and numpy arrays, and their merge into words.

`sentence_attention` runs the model's `call_with_attention_weights` (the
teacher-forced forward pass that also returns every layer's weights) on one
source and target and keeps the real positions: encoder self-attention
[layers, heads, source, source], decoder self-attention [layers, heads,
target, target], encoder-decoder attention [layers, heads, target, source].

Token labels. Source positions are the source pieces and the final <EOS>.
Decoder position i reads target piece i - 1 (the target shifted right, a start
symbol at 0) and predicts target piece i; like tensor2tensor's attention
notebook, decoder positions (queries and self-attention keys) are labelled
with the piece they predict, the last being <EOS>.

Merging pieces into words (`merge_pieces`): a word's row is the average of
its pieces' rows (each piece is one query; averaging keeps the row a
distribution) and a word's column is the sum of its pieces' columns (the
weight that went to any piece of the word). Rows of real queries still sum
to 1. Sentencepiece marks a word's first piece with U+2581; an encoder
without such marks (whole tokens) has one piece per word.
"""

import dataclasses
from typing import Dict, List, Sequence

import numpy as np

from t2tlite.constants import EOS_ID

KINDS = ("encoder", "decoder", "encoder_decoder")
KIND_TITLES = {"encoder": "encoder self-attention", "decoder": "decoder self-attention",
               "encoder_decoder": "encoder-decoder attention"}
WORD_START = "\u2581"  # Sentencepiece's mark of a piece that starts a word.
EOS_TOKEN = "<EOS>"


@dataclasses.dataclass
class SentenceAttention:
  """Tokens and weights of one sentence pair; arrays are [layers, heads, query, key] float32."""
  source_tokens: List[str]
  target_tokens: List[str]
  encoder: np.ndarray
  decoder: np.ndarray
  encoder_decoder: np.ndarray

  @property
  def num_layers(self) -> Dict[str, int]:
    return {kind: self.weights(kind).shape[0] for kind in KINDS}

  @property
  def num_heads(self) -> int:
    return self.encoder.shape[1]

  def weights(self, kind: str) -> np.ndarray:
    return getattr(self, kind)

  def tokens(self, kind: str):
    """(query tokens, key tokens) of an attention kind."""
    if kind == "encoder":
      return self.source_tokens, self.source_tokens
    if kind == "decoder":
      return self.target_tokens, self.target_tokens
    return self.target_tokens, self.source_tokens

  def save_npz(self, path: str) -> None:
    """Writes the arrays and the tokens (numpy string arrays) to one .npz, atomically."""
    from t2tlite import files
    with files.atomic_write(path, "wb") as f:
      np.savez(f, source_tokens=np.array(self.source_tokens, dtype=str),
               target_tokens=np.array(self.target_tokens, dtype=str),
               **{kind: self.weights(kind) for kind in KINDS})

  @classmethod
  def load_npz(cls, path: str) -> "SentenceAttention":
    with np.load(path) as data:
      return cls(source_tokens=[str(t) for t in data["source_tokens"]],
                 target_tokens=[str(t) for t in data["target_tokens"]],
                 **{kind: data[kind] for kind in KINDS})


def sentence_attention(model, source_ids: Sequence[int], target_ids: Sequence[int],
                       source_tokens: Sequence[str], target_tokens: Sequence[str]):
  """Ids without EOS (EOS is appended, as in training) -> SentenceAttention.

  `source_tokens` / `target_tokens` label the ids (see `piece_strings`); the
  <EOS> labels are added here.
  """
  from keras import ops
  inputs = np.array([list(source_ids) + [EOS_ID]], np.int32)
  targets = np.array([list(target_ids) + [EOS_ID]], np.int32)
  _, weights = model.call_with_attention_weights(inputs, targets)

  def stack(per_layer):
    return np.stack([ops.convert_to_numpy(w)[0] for w in per_layer]).astype(np.float32)

  return SentenceAttention(
      source_tokens=list(source_tokens) + [EOS_TOKEN],
      target_tokens=list(target_tokens) + [EOS_TOKEN],
      encoder=stack(weights.encoder), decoder=stack(weights.decoder),
      encoder_decoder=stack(weights.encoder_decoder))


def piece_strings(encoder, ids: Sequence[int]) -> List[str]:
  """The piece each id stands for: sentencepiece pieces, whole tokens, else the decoded id."""
  processor = getattr(encoder, "processor", None)
  if processor is not None:
    return [processor.id_to_piece(int(i)) for i in ids]
  tokens = getattr(encoder, "tokens", None)
  if tokens is not None:
    return [tokens[int(i)] for i in ids]
  return [encoder.decode([int(i)]) for i in ids]


def word_groups(pieces: Sequence[str]) -> List[List[int]]:
  """Piece indices grouped into words: a new word at each U+2581-marked piece and at <EOS>.

  Without any U+2581 mark (a whole-token vocabulary) every piece is a word.
  """
  if not any(p.startswith(WORD_START) for p in pieces):
    return [[i] for i in range(len(pieces))]
  groups = []
  for i, piece in enumerate(pieces):
    previous = pieces[i - 1] if i else None
    if i == 0 or piece.startswith(WORD_START) or EOS_TOKEN in (piece, previous):
      groups.append([i])
    else:
      groups[-1].append(i)
  return groups


def merge_matrix(weights: np.ndarray, query_groups, key_groups) -> np.ndarray:
  """[..., q, k] -> [..., Q, K]: mean over each query word's pieces, sum over each key word's."""
  average = np.zeros((len(query_groups), weights.shape[-2]), np.float64)
  for row, group in enumerate(query_groups):
    average[row, group] = 1.0 / len(group)
  total = np.zeros((weights.shape[-1], len(key_groups)), np.float64)
  for column, group in enumerate(key_groups):
    total[group, column] = 1.0
  return np.einsum("Qq,...qk,kK->...QK", average, weights, total).astype(np.float32)


def merge_pieces(attention: SentenceAttention) -> SentenceAttention:
  """The same attention over words (see the module docstring)."""
  source = word_groups(attention.source_tokens)
  target = word_groups(attention.target_tokens)

  def words(tokens, groups):
    return ["".join(tokens[i] for i in g).replace(WORD_START, "") or tokens[g[0]]
            for g in groups]

  return SentenceAttention(
      source_tokens=words(attention.source_tokens, source),
      target_tokens=words(attention.target_tokens, target),
      encoder=merge_matrix(attention.encoder, source, source),
      decoder=merge_matrix(attention.decoder, target, target),
      encoder_decoder=merge_matrix(attention.encoder_decoder, target, source))


def farthest_reaching_query(layer_weights: np.ndarray, tokens: Sequence[str]) -> int:
  """[heads, q, k] -> the query that puts the most weight farthest away.

  The default token of Figure 3 (the paper's shows a long-distance
  dependency): argmax over queries q of max over keys k of w[q, k] |q - k|,
  w averaged over heads, <EOS> excluded. A peaked weight on a distant word
  scores high; attention spread evenly over the sentence scores about 1.
  """
  mean = layer_weights.mean(axis=0)  # [q, k]
  distance = np.abs(np.arange(mean.shape[0])[:, None] - np.arange(mean.shape[1])[None, :])
  reach = (mean * distance).max(-1)
  reach[[i for i, t in enumerate(tokens) if t == EOS_TOKEN]] = -1.0
  return int(np.argmax(reach))


def most_focused_heads(layer_weights: np.ndarray, count: int = 2) -> List[int]:
  """[heads, q, k] -> the `count` heads with the highest mean row maximum (sharpest attention).

  The default heads of Figures 4 and 5, which show heads with clear patterns.
  """
  focus = layer_weights.max(axis=-1).mean(axis=-1)  # [heads]
  return [int(h) for h in np.argsort(-focus, kind="stable")[:count]]
