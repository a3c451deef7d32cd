"""Subword vocabularies: learned with sentencepiece, applied in-graph with tensorflow_text.

One `.model` file is the whole vocabulary. `sentencepiece` learns it (BPE as
the paper's EN-DE vocabulary, or the unigram model as the nearest sentencepiece
offers to GNMT's word pieces for EN-FR); `tensorflow_text.SentencepieceTokenizer`
applies the same file inside TensorFlow graphs (`encode_batch`, an exported
serving graph), and sentencepiece's own processor encodes where a graph only
adds overhead (single lines; t2t-datagen's bulk encoding, where its
multi-threaded C++ batch encoder is ~2x faster). Both give the same ids
(tests/test_translate.py checks it on every line of real test sets).

Ids follow t2tlite's convention: 0 = padding, 1 = EOS, then 2 = unknown.
The vocabulary is lossless: no Unicode normalisation (the "identity" rule),
whitespace kept as written, and characters outside the learned pieces fall
back to their UTF-8 bytes, so decode(encode(line)) == line for every line.
The one exception is asked for by name: a vocabulary learned with
`lowercase=True` lowercases every line it encodes (for benchmarks trained and
scored in lowercase, such as Multi30k's).
"""

import contextlib
import io
import os
import sys
import tempfile
from typing import Iterable, List, Sequence, Tuple

from absl import logging

from t2tlite import files
from t2tlite.data import text_encoder
from t2tlite.errors import UserError

VOCAB_TYPES = ("bpe", "unigram")
WORD_BOUNDARY = "\u2581"  # sentencepiece's mark for the space before a piece.


class VocabularyError(UserError):
  """An unusable or mismatched vocabulary file; one line naming it."""


def train_vocabulary(sentences: Iterable[str], model_path: str, vocab_size: int,
                     vocab_type: str = "bpe", sample_size: int = 1_000_000,
                     seed: int = 1, user_defined_symbols: Sequence[str] = (),
                     lowercase: bool = False) -> "SubwordEncoder":
  """Learns a vocabulary of exactly `vocab_size` pieces from `sentences`; writes `model_path`.

  `sample_size` sentences are drawn uniformly (by sentencepiece's reservoir
  sampler, seeded) from the stream, which may be far longer. The file appears
  only when complete (written beside it, then renamed).

  `user_defined_symbols` become pieces of their own, never split and never
  merged with their neighbours (a parser's `(NP`, `)NP`, `XX`). Written as
  `WORD_BOUNDARY + token`, a space-separated token is one piece, not a bare
  boundary piece followed by the symbol.

  `lowercase` puts lowercasing into the model's own normalizer (one rule per
  character, `lowercase_rules`), so every encode of this vocabulary, in
  datagen, in t2t-decoder's inputs and inside an exported model, lowercases
  alike, and decoding yields lowercase text.
  """
  import sentencepiece as spm  # Only datagen learns vocabularies.

  if vocab_type not in VOCAB_TYPES:
    raise VocabularyError(f"vocab_type={vocab_type!r} must be one of {', '.join(VOCAB_TYPES)}")
  prefix = model_path[:-len(".model")] if model_path.endswith(".model") else model_path
  model = io.BytesIO()
  spm.set_random_generator_seed(seed)
  with (tempfile.TemporaryDirectory() if lowercase else contextlib.nullcontext()) as tmp:
    normalization = {"normalization_rule_name": "identity"}
    if lowercase:  # sentencepiece reads custom rules from a file only.
      normalization = {"normalization_rule_tsv": os.path.join(tmp, "lowercase.tsv")}
      with open(normalization["normalization_rule_tsv"], "w", encoding="utf-8") as f:
        f.writelines(f"{source}\t{target}\n" for source, target in lowercase_rules())
    try:
      spm.SentencePieceTrainer.train(
          sentence_iterator=iter(sentences), model_writer=model, vocab_size=vocab_size,
          model_type=vocab_type, pad_id=text_encoder.PAD_ID, eos_id=text_encoder.EOS_ID,
          unk_id=2, bos_id=-1, pad_piece=text_encoder.PAD, eos_piece=text_encoder.EOS,
          remove_extra_whitespaces=False, byte_fallback=True, character_coverage=1.0,
          input_sentence_size=sample_size, shuffle_input_sentence=True,
          num_threads=os.cpu_count() or 1, max_sentence_length=16384, minloglevel=2,
          user_defined_symbols=list(user_defined_symbols), **normalization)
    except RuntimeError as e:
      raise VocabularyError(f"{model_path}: sentencepiece could not learn {vocab_size} "
                            f"pieces: {str(e).splitlines()[-1]}") from None
  from sentencepiece import sentencepiece_model_pb2
  proto = sentencepiece_model_pb2.ModelProto.FromString(model.getvalue())
  with files.atomic_paths([prefix + ".model", prefix + ".vocab"]) as (model_tmp, vocab_tmp):
    with open(model_tmp, "wb") as f:
      f.write(model.getvalue())
    with open(vocab_tmp, "w", encoding="utf-8") as f:  # Human-readable piece list, as spm writes it.
      f.writelines(f"{piece.piece}\t{piece.score:g}\n" for piece in proto.pieces)
  return SubwordEncoder(prefix + ".model")


def lowercase_rules() -> List[Tuple[str, str]]:
  """sentencepiece normalization rules (hex code points) mapping each character to `str.lower`'s.

  Character by character, so it equals `line.lower()` except where Python
  looks at context (a Greek capital sigma ending a word). Not Unicode case
  folding (sentencepiece's `nmt_nfkc_cf`), which would also turn German `ß`
  into `ss` and so miss every `ß` of a lowercased reference.
  """
  rules = []
  for code in range(sys.maxunicode + 1):
    if 0xD800 <= code <= 0xDFFF:  # Surrogates are not characters.
      continue
    lower = chr(code).lower()
    if lower != chr(code):
      rules.append((f"{code:X}", " ".join(f"{ord(c):X}" for c in lower)))
  return rules


class SubwordEncoder(text_encoder.TextEncoder):
  """A sentencepiece model file as a TextEncoder, with in-graph batch methods."""

  def __init__(self, model_path: str):
    import sentencepiece as spm

    if not os.path.exists(model_path):
      raise VocabularyError(f"{model_path}: no such vocabulary file")
    self.model_path = model_path
    with open(model_path, "rb") as f:
      self._model_bytes = f.read()
    try:
      self._processor = spm.SentencePieceProcessor(model_proto=self._model_bytes)
    except RuntimeError:
      raise VocabularyError(f"{model_path}: not a sentencepiece model") from None
    if (self._processor.pad_id(), self._processor.eos_id()) != (text_encoder.PAD_ID,
                                                                 text_encoder.EOS_ID):
      raise VocabularyError(f"{model_path}: pad/EOS ids are {self._processor.pad_id()}/"
                            f"{self._processor.eos_id()}, t2tlite needs 0/1")
    self._tokenizer = None

  @property
  def vocab_size(self) -> int:
    return self._processor.get_piece_size()

  @property
  def lowercases(self) -> bool:
    """Whether this vocabulary was learned with `lowercase=True` (its normalizer lowercases)."""
    return self._processor.normalize("AÄ").endswith("aä")  # After a word-boundary mark.

  @property
  def processor(self):
    """The sentencepiece processor (C++ batch encoding for datagen)."""
    return self._processor

  @property
  def tokenizer(self):
    """The same model as a `tensorflow_text.SentencepieceTokenizer` (graph op)."""
    if self._tokenizer is None:
      import tensorflow_text
      self._tokenizer = tensorflow_text.SentencepieceTokenizer(model=self._model_bytes)
    return self._tokenizer

  def encode(self, text: str) -> List[int]:
    return self._processor.encode(text)

  def decode(self, ids: Iterable[int]) -> str:
    return self._processor.decode(text_encoder.until_eos(ids))

  def encode_batch(self, lines: Sequence[str]) -> List[List[int]]:
    """Many lines at once, in-graph (tensorflow_text)."""
    import tensorflow as tf
    if not lines:
      return []
    return self.tokenizer.tokenize(tf.constant(list(lines))).to_list()

  def decode_batch(self, ids: Sequence[Sequence[int]]) -> List[str]:
    import tensorflow as tf
    if not ids:
      return []
    stripped = [text_encoder.until_eos(x) for x in ids]
    ragged = tf.ragged.constant(stripped, dtype=tf.int32, row_splits_dtype=tf.int64)
    return [b.decode("utf-8") for b in self.tokenizer.detokenize(ragged).numpy()]


def sampled_encoder(encoder: SubwordEncoder, dropout: float, seed: int = 1):
  """lines -> id lists, each segmentation sampled with BPE-dropout `dropout` (Provilkov et al.).

  sentencepiece's sampling on a BPE model skips each merge with probability
  `dropout`, so the pieces still spell the line exactly (decode(ids) == line)
  but are finer. Reproducible: call k reseeds sentencepiece's generator with
  seed + k and encodes on one thread (its multi-threaded encoder samples in
  whatever order its threads run), so the same calls in the same order give
  the same ids, whichever thread makes them.
  """
  import sentencepiece as spm

  calls = [0]

  def encode(lines: Sequence[str]) -> List[List[int]]:
    spm.set_random_generator_seed(seed + calls[0])
    calls[0] += 1
    return encoder.processor.encode(list(lines), enable_sampling=True, alpha=dropout,
                                    nbest_size=-1, num_threads=1)
  return encode


def load_or_train(model_path: str, vocab_size: int, sentences_fn, vocab_type: str = "bpe",
                  sample_size: int = 1_000_000,
                  user_defined_symbols_fn=None, lowercase: bool = False) -> SubwordEncoder:
  """The vocabulary at `model_path`, learned first if absent; never silently replaced.

  An existing file is reused only if it has the requested size (within 1%,
  the tolerance sentencepiece may need) and lowercases as asked; otherwise
  this is an error naming it, because retraining would orphan every shard and
  model built on it.
  """
  if os.path.exists(model_path):
    encoder = SubwordEncoder(model_path)
    if abs(encoder.vocab_size - vocab_size) > 0.01 * vocab_size:
      raise VocabularyError(
          f"{model_path} has {encoder.vocab_size} pieces but vocab_size={vocab_size} was "
          f"asked; delete it or use another --data_dir (it is never replaced silently)")
    if encoder.lowercases != lowercase:
      raise VocabularyError(
          f"{model_path} {'lowercases' if encoder.lowercases else 'keeps case'} but "
          f"lowercase={lowercase} was asked; delete it or use another --data_dir")
    logging.info("vocabulary: using existing %s (%d pieces)", model_path, encoder.vocab_size)
    return encoder
  logging.info("vocabulary: learning %d %s pieces from up to %d sentences -> %s",
               vocab_size, vocab_type, sample_size, model_path)
  symbols = user_defined_symbols_fn() if user_defined_symbols_fn else ()
  return train_vocabulary(sentences_fn(), model_path, vocab_size, vocab_type, sample_size,
                          user_defined_symbols=symbols, lowercase=lowercase)
