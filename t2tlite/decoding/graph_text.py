"""A problem's text <-> ids inside a TensorFlow graph, for the exported model (export.py).

The exported SavedModel maps raw lines to the lines `t2t-decoder` writes, so
everything `DecodePipeline` does in Python around the compiled search has an
in-graph twin here, and each twin must give exactly what its Python original
gives (tests/test_export.py compares them on real test sets):

- `SubwordEncoder` (sentencepiece) -> `SentencepieceText`: tensorflow_text's
  tokenizer over the same `.model` file, which the SavedModel also keeps in
  its assets (so the export is one self-contained directory);
- `TokenEncoder` (algorithmic digit strings) -> `TokenText`: a lookup table
  over the fixed token list;
- the parsing postprocessor (a tree over the source words) -> `tree_lines`,
  for the well-formed trees the tree constraint guarantees.

Ids follow t2tlite's convention (constants.py): a hypothesis ends at its first
EOS or PAD (`until_eos`).
"""

import tensorflow as tf

from t2tlite.constants import EOS_ID, PAD_ID


def ids_until_eos(ids):
  """int32 [n, length] search output -> ragged [n, (tokens)]: the ids before the first EOS/PAD."""
  keep = tf.math.cumprod(tf.cast((ids != EOS_ID) & (ids != PAD_ID), tf.int32), axis=-1)
  return tf.RaggedTensor.from_tensor(ids, lengths=tf.reduce_sum(keep, axis=-1))


class SentencepieceText(tf.Module):
  """In-graph twin of `subword.SubwordEncoder` (same file, same ids, same text)."""

  def __init__(self, encoder):
    super().__init__()
    import tensorflow_text
    # The .model file, copied into the export's assets/ (the vocabulary travels with the model
    # and a client can read it). tensorflow_text's SentencepieceOp takes the model as an op
    # attribute, not a tensor, so the graph holds its own copy as well and never reads the file.
    self.vocabulary = tf.saved_model.Asset(encoder.model_path)
    self._tokenizer = tensorflow_text.SentencepieceTokenizer(
        model=encoder.processor.serialized_model_proto())

  def encode(self, lines):
    """string [n] -> int32 ragged [n, (tokens)], as `SubwordEncoder.encode` per line."""
    return tf.cast(self._tokenizer.tokenize(lines), tf.int32)

  def decode(self, ids):
    """int32 ragged [n, (tokens)] (no EOS) -> string [n], as `SubwordEncoder.decode`."""
    return self._tokenizer.detokenize(ids)


class TokenText(tf.Module):
  """In-graph twin of `text_encoder.TokenEncoder`: whitespace-separated tokens of a fixed list."""

  def __init__(self, encoder):
    super().__init__()
    self.tokens = tf.constant(encoder.tokens)  # Index = id; 0 and 1 are <pad> and <EOS>.
    real = encoder.tokens[2:]
    self.table = tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(tf.constant(real), tf.range(2, 2 + len(real))),
        default_value=-1)

  def encode(self, lines):
    """string [n] -> int32 ragged [n, (tokens)]; a token outside the list fails the request."""
    words = tf.strings.split(lines)
    ids = tf.ragged.map_flat_values(self.table.lookup, words)
    tf.debugging.assert_non_negative(
        ids.flat_values, message="a token of the input is not in the model's vocabulary")
    return ids

  def decode(self, ids):
    """int32 ragged [n, (tokens)] -> string [n]: the tokens joined by single spaces."""
    ids = tf.ragged.map_flat_values(
        lambda flat: tf.where(flat < tf.size(self.tokens), flat, PAD_ID), ids)
    words = tf.ragged.map_flat_values(lambda flat: tf.gather(self.tokens, flat), ids)
    # TokenEncoder.decode drops ids beyond its list; they were mapped to PAD (""): drop them.
    words = tf.ragged.boolean_mask(words, tf.ragged.map_flat_values(lambda f: f != PAD_ID, ids))
    return tf.strings.reduce_join(words, axis=-1, separator=" ")


def for_encoder(encoder):
  """The in-graph twin of a problem's encoder; a one-line error names what has none."""
  from t2tlite.data import subword, text_encoder
  if isinstance(encoder, subword.SubwordEncoder):
    return SentencepieceText(encoder)
  if isinstance(encoder, text_encoder.TokenEncoder):
    return TokenText(encoder)
  from t2tlite.errors import UserError
  raise UserError(f"cannot export a model whose encoder is a {type(encoder).__name__}: only "
                  "sentencepiece (SubwordEncoder) and token-list (TokenEncoder) vocabularies "
                  "have an in-graph twin")


def tree_lines(sources, targets):
  """Parsing: source words string [n] and linearized trees string [n] -> EVALB lines [n].

  The in-graph twin of `linearize.decoded_tree_line` for well-formed trees
  with one word slot per source word (what the tree constraint guarantees):
  `(S (NP XX XX )NP )S` over "a b" -> `(TOP (S (NP (XX a) (XX b))))`. Each
  slot (`XX`, or the word itself with `target_words`) takes the next source
  word, a closing `)LABEL` becomes `)`.
  """
  tokens = tf.strings.split(targets)  # [n, (tokens)]
  lengths = tokens.row_lengths()
  dense = tokens.to_tensor("")  # [n, t]
  words = tf.strings.split(sources).to_tensor("")  # [n, w]
  words = tf.pad(words, [[0, 0], [0, 1]])  # A column to index when a row has no words.
  # A word slot is any token but a bracket: `XX`, or with the target_words option the word
  # itself (linearize.delinearize places the source word there either way).
  opening = tf.strings.regex_full_match(dense, r"\([^)]+")
  closing = tf.strings.regex_full_match(dense, r"\)[^(]*")
  is_word = ~opening & ~closing & tf.not_equal(dense, "")
  # The k-th XX of a row takes that row's k-th word.
  word_index = tf.cumsum(tf.cast(is_word, tf.int32), axis=1, exclusive=True)
  word_index = tf.minimum(word_index, tf.shape(words)[1] - 1)
  preterminals = tf.strings.join(["(XX ", tf.gather(words, word_index, batch_dims=1), ")"])
  dense = tf.where(is_word, preterminals, tf.where(closing, ")", dense))
  text = tf.strings.reduce_join(tf.RaggedTensor.from_tensor(dense, lengths=lengths), axis=-1,
                                separator=" ")
  text = tf.strings.regex_replace(text, r" \)", ")")  # `)` follows a word or bracket directly.
  return tf.strings.join(["(TOP ", text, ")"])
