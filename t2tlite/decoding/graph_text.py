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


def _brackets(dense):
  """Tokens string [n, t] -> (opening, closing) bool [n, t]: `(LABEL` and `)LABEL` tokens."""
  return (tf.strings.regex_full_match(dense, r"\([^)]+"),
          tf.strings.regex_full_match(dense, r"\)[^(]*"))


def without_unary_repeats(tokens):
  """Linearized well-formed trees, string ragged [n, (t)] -> the same without each constituent
  that is the only child of a parent with its label: `(NP (NP XX )NP )NP` -> `(NP XX )NP`.

  The in-graph twin of `trees.collapse_unary_repeats`. In token terms an
  opening `(X` right after an opening `(X` is such a child exactly when the
  token after its matching `)X` closes again (the parent has no other child);
  both of its brackets are dropped. Matching brackets: give each bracket its
  level (an opening one the depth it opens, a closing one the depth it
  closes); at each level openings and closings then alternate in position
  order, so sorting by (level, position) puts each opening bracket right
  before its match.
  """
  lengths = tf.cast(tokens.row_lengths(), tf.int32)
  dense = tokens.to_tensor("")  # [n, t]
  t = tf.shape(dense)[1]
  opening, closing = _brackets(dense)
  depth = tf.cumsum(tf.cast(opening, tf.int32) - tf.cast(closing, tf.int32), axis=1)
  level = tf.where(closing, depth + 1, depth)
  position = tf.range(t)[tf.newaxis]
  key = tf.where(opening | closing, level * (t + 1) + position, tf.int32.max)
  order = tf.argsort(key, axis=1, stable=True)  # [n, t]: positions by (level, position).
  rank = tf.argsort(order, axis=1)  # Where each position sits in `order`.
  following = tf.concat([order[:, 1:], tf.fill([tf.shape(order)[0], 1], t)], axis=1)
  match = tf.gather(following, rank, batch_dims=1)  # Opening bracket -> its closing one.
  closes_again = tf.gather(tf.pad(closing, [[0, 0], [0, 2]]), match + 1, batch_dims=1)
  same_as_previous = tf.pad(
      opening[:, 1:] & opening[:, :-1] & tf.equal(dense[:, 1:], dense[:, :-1]), [[0, 0], [1, 0]])
  repeat = opening & same_as_previous & closes_again  # [n, t]: a child to drop.
  # A closing bracket is dropped with its opening one: the bracket just before it in `order`.
  preceding = tf.concat([tf.fill([tf.shape(order)[0], 1], 0), order[:, :-1]], axis=1)
  opened_by = tf.gather(preceding, rank, batch_dims=1)
  dropped_close = closing & tf.gather(repeat, opened_by, batch_dims=1)
  keep = ~repeat & ~dropped_close & (position < lengths[:, tf.newaxis])
  return tf.ragged.boolean_mask(dense, keep)


def tree_lines(sources, targets, collapse_unary_repeats: bool = False):
  """Parsing: source words string [n] and linearized trees string [n] -> EVALB lines [n].

  The in-graph twin of `linearize.decoded_tree_line` for well-formed trees
  with one word slot per source word (what the tree constraint guarantees):
  `(S (NP XX XX )NP )S` over "a b" -> `(TOP (S (NP (XX a) (XX b))))`. Each
  slot (`XX`, or the word itself with `target_words`) takes the next source
  word, a closing `)LABEL` becomes `)`. collapse_unary_repeats: as
  `decoded_tree_line`'s (`without_unary_repeats`).
  """
  tokens = tf.strings.split(targets)  # [n, (tokens)]
  if collapse_unary_repeats:
    tokens = without_unary_repeats(tokens)
  lengths = tokens.row_lengths()
  dense = tokens.to_tensor("")  # [n, t]
  words = tf.strings.split(sources).to_tensor("")  # [n, w]
  words = tf.pad(words, [[0, 0], [0, 1]])  # A column to index when a row has no words.
  # A word slot is any token but a bracket: `XX`, or with the target_words option the word
  # itself (linearize.delinearize places the source word there either way).
  opening, closing = _brackets(dense)
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
