"""Labeled bracketing scores exactly as EVALB computes them (Sekine & Collins 1997).

EVALB is the parsing community's scorer: the paper's 91.3 F1 (Table 4) and
every WSJ number it is compared with come from `evalb -p COLLINS.prm gold test`.
This module follows EVALB's documented rules (its README, sections [4]-[7])
and, where the README is silent, its C source `evalb.c` (the 2006 version with
David Ellis' quote fix, as distributed with the Berkeley and self-attentive
parsers), function by function:

Reading a line (`read_line`): `(` then a label up to whitespace or a bracket;
if whitespace, a word, and the word directly followed by `)`, the bracket is a
terminal (a word and its POS tag), else a constituent (the PTB's unlabeled
root is a constituent labeled ""). A terminal whose tag is a DELETE_LABEL is
dropped with its word (COLLINS.prm: `-NONE-` and the punctuation tags
`, : `` '' .`), so constituent spans count kept words only; the sentence
length counts every terminal whose tag is not a DELETE_LABEL_FOR_LENGTH
(COLLINS.prm: `-NONE-`, so punctuation counts), from the gold line.

Scoring a sentence (`calc_result`): no test words -> "skip"; a word count
that differs after deletion (and after the QUOTE_LABEL fix) or a word that
differs (EQ_WORD pairs are equal) -> "error"; error and skip sentences add
nothing to the bracket totals but are counted, also under the length cutoff.
Otherwise (`massage_data`) constituents spanning no kept word are deleted,
labels are cut at their first `-` or `=` (`NP-SBJ` -> `NP`), constituents
whose label is a DELETE_LABEL (or EQ_LABEL-equal to one) are deleted; then
each gold constituent matches the first unmatched test constituent with the
same span and an equal label (EQ_LABEL pairs are equal; COLLINS.prm: ADVP =
PRT; LABELED 0 ignores labels), which gives min(n, m) matches for n gold and m
test copies of one constituent (README [7] 5). Crossing counts test
constituents that cross any gold constituent; tagging accuracy compares the
tags of the kept words. A sentence is a complete match when matched = gold =
test constituents. Totals: recall = matched / gold, precision = matched / test,
F1 = 2PR / (P + R) (0 when P + R = 0, where EVALB prints nan), each for all
sentences and for those whose gold length <= CUTOFF_LEN.

EVALB stops, without a summary, at the error after MAX_ERROR + 1 (its
`Error_count++ > Max_error`); `stop_at_max_error=False` scores on instead.
It also stops on text it cannot read at all (a word not directly followed by
`)`, a word outside a bracket): those are `EvalbFatal` here, or, when not
stopping, error sentences. EVALB's fixed buffers (200 words, 5000 characters
a line) are not imitated.
"""

import dataclasses
import re
from typing import Dict, List, Optional, Sequence, Tuple

from absl import logging

from t2tlite.errors import UserError


class EvalbError(UserError):
  """A bad parameter file; one line naming file and line."""


class EvalbFatal(ValueError):
  """Where EVALB itself would stop: too many errors, or a line it cannot read."""


@dataclasses.dataclass(frozen=True)
class EvalbParams:
  """The keys of an EVALB .prm file (README [6]); defaults are EVALB's own, not COLLINS.prm's."""
  labeled: bool = True  # LABELED: 1 labeled, 0 unlabeled bracketing.
  delete_labels: Tuple[str, ...] = ()  # DELETE_LABEL: tags dropped with their word; constituents dropped, children kept.
  delete_labels_for_length: Tuple[str, ...] = ()  # DELETE_LABEL_FOR_LENGTH: tags not counted in sentence length.
  eq_labels: Tuple[Tuple[str, str], ...] = ()  # EQ_LABEL: label pairs scored as equal.
  eq_words: Tuple[Tuple[str, str], ...] = ()  # EQ_WORD: word pairs taken as equal.
  quote_labels: Tuple[str, ...] = ()  # QUOTE_LABEL (2006): tags of ' " / whose deletion may differ between files.
  cutoff_len: int = 40  # CUTOFF_LEN: the second summary covers gold length <= this.
  max_error: int = 10  # MAX_ERROR: EVALB stops at the error after this many.
  debug: int = 0  # DEBUG: read and kept; per-sentence lines are printed by t2t-parse-eval anyway.


# COLLINS.prm as distributed with EVALB (../shared/data/ptb/evalb/COLLINS.prm; a test reads
# that file and checks it equals this).
COLLINS = EvalbParams(
    labeled=True, delete_labels=("TOP", "-NONE-", ",", ":", "``", "''", "."),
    delete_labels_for_length=("-NONE-",), eq_labels=(("ADVP", "PRT"),), cutoff_len=40,
    max_error=10)

_INT_KEYS = {"DEBUG": "debug", "MAX_ERROR": "max_error", "CUTOFF_LEN": "cutoff_len",
             "LABELED": "labeled"}
_LIST_KEYS = {"DELETE_LABEL": "delete_labels", "DELETE_LABEL_FOR_LENGTH":
              "delete_labels_for_length", "QUOTE_LABEL": "quote_labels"}
_PAIR_KEYS = {"EQ_LABEL": "eq_labels", "EQ_WORD": "eq_words"}


def read_params(path: str) -> EvalbParams:
  """An EVALB parameter file, read as `read_parameter_file` does.

  Lines starting with `#` or shorter than 3 characters are skipped; a line is
  `KEY value`. Unknown keys are warned about and ignored, as EVALB does; a
  value that is not an integer where one is needed, or an EQ_ pair without two
  values, is an error here (EVALB would read 0 or skip it silently).
  """
  values: Dict[str, object] = {}
  lists: Dict[str, List] = {name: [] for name in list(_LIST_KEYS.values()) + list(_PAIR_KEYS.values())}
  try:
    with open(path, encoding="ascii", errors="replace") as f:
      lines = f.read().splitlines()
  except OSError as e:
    raise EvalbError(f"{path}: {e.strerror}") from None
  for number, raw in enumerate(lines, 1):
    line = raw.rstrip()
    if line.startswith("#") or len(line) < 3:
      continue
    key, value = (line.split(None, 1) + [""])[:2]
    where = f"{path}: line {number}"
    if not value:
      raise EvalbError(f"{where}: {key} has no value")
    if key in _INT_KEYS:
      try:
        values[_INT_KEYS[key]] = int(value.split()[0])
      except ValueError:
        raise EvalbError(f"{where}: {key} {value!r} is not an integer") from None
    elif key in _LIST_KEYS:
      lists[_LIST_KEYS[key]].append(value)
    elif key in _PAIR_KEYS:
      pair = value.split()
      if len(pair) != 2:
        raise EvalbError(f"{where}: {key} needs two values, got {value!r}")
      lists[_PAIR_KEYS[key]].append(tuple(pair))
    else:
      logging.warning("%s: unknown keyword %s, ignored (as EVALB does)", where, key)
  values["labeled"] = bool(values.get("labeled", 1))
  return EvalbParams(**values, **{k: tuple(v) for k, v in lists.items()})


@dataclasses.dataclass
class _Bracket:
  start: int
  end: int = -1
  label: str = ""
  deleted: bool = False
  matched: bool = False


@dataclasses.dataclass
class _QuoteTerm:
  word: str
  label: str
  index: int  # Kept-word position where it stands (or would stand, if deleted).
  bracket: int  # Brackets opened before it.
  open_brackets: List[int]  # Brackets open around it.


@dataclasses.dataclass
class _Line:
  terminals: List[List[str]]  # [word, tag] of kept words.
  brackets: List[_Bracket]
  length: int  # Words counted for the length cutoff.
  quotes: List[_QuoteTerm]
  errors: List[str]
  fatal: Optional[str] = None  # EVALB could not go on reading this line.


_TOKEN = re.compile(r"\(|\)|\s+|[^\s()]+")


def _read_line(text: str, params: EvalbParams) -> _Line:
  """EVALB's `read_line` over a token stream (see the module docstring)."""
  tokens = _TOKEN.findall(text)
  line = _Line([], [], 0, [], [])
  stack: List[int] = []
  i, n = 0, len(tokens)

  def word_token(k):
    return k < n and tokens[k] not in "()" and not tokens[k].isspace()

  while i < n:
    token = tokens[i]
    if token.isspace():
      i += 1
    elif token == "(":
      i += 1
      label = tokens[i] if word_token(i) else ""
      i += bool(label)
      if i < n and tokens[i].isspace():
        j = i + 1
        word = tokens[j] if word_token(j) else ""
        k = j + bool(word)
        if k < n and tokens[k] == ")":  # A terminal: (TAG word)
          if label not in params.delete_labels_for_length:
            line.length += 1
          if label in params.quote_labels and word in ("'", '"', "/"):
            line.quotes.append(_QuoteTerm(word, label, len(line.terminals), len(line.brackets),
                                          list(stack)))
          if label not in params.delete_labels:
            line.terminals.append([word, label])
          i = k + 1
          continue
        if k >= n or tokens[k] != "(":
          line.errors.append("More than two elements in a bracket")
          if word:  # EVALB then loops on the word ("Reading sentence") until it exits.
            line.fatal = f"cannot read {word!r} after ({label}: a word must be followed by ')'"
            return line
      stack.append(len(line.brackets))
      line.brackets.append(_Bracket(start=len(line.terminals), label=label))
    elif token == ")":
      if not stack:
        line.errors.append("Bracketing unbalance (too many close bracket)")
        i += 1
        continue
      line.brackets[stack.pop()].end = len(line.terminals)
      i += 1
    else:  # EVALB reports "Reading sentence" here without moving on, until it exits.
      line.fatal = f"cannot read {token!r} (a word outside a (TAG word) bracket)"
      return line
  if stack:  # Never closed: their end stays -1, as in EVALB.
    line.errors.append("Bracketing is unbalanced (too many open bracket)")
  return line


def _reinsert(quote: _QuoteTerm, line: _Line) -> None:
  """EVALB's `reinsert_term`: put a deleted quote terminal back, shifting the spans after it."""
  line.terminals.insert(quote.index, [quote.word, quote.label])
  for k, bracket in enumerate(line.brackets):
    if k >= quote.bracket:
      bracket.start += 1
      bracket.end += 1
  for k in quote.open_brackets:
    line.brackets[k].end += 1


def _fix_quote(gold: _Line, test: _Line, params: EvalbParams) -> None:
  """EVALB's `fix_quote` (2006): a quote deleted in one file but kept in the other is put back."""
  for i, t_quote in enumerate(test.quotes):
    for j, g_quote in enumerate(gold.quotes):
      if g_quote.index != t_quote.index or g_quote.label == t_quote.label:
        continue
      if g_quote.label in params.delete_labels and t_quote.label not in params.delete_labels:
        _reinsert(g_quote, gold)
        for later in gold.quotes[j:]:
          later.index += 1
      elif t_quote.label in params.delete_labels and g_quote.label not in params.delete_labels:
        _reinsert(t_quote, test)
        for later in test.quotes[i:]:
          later.index += 1


@dataclasses.dataclass
class SentenceResult:
  """One line of EVALB's per-sentence table."""
  id: int  # Line number.
  length: int  # Gold length (DELETE_LABEL_FOR_LENGTH tags not counted).
  status: int  # 0 scored, 1 error, 2 skip.
  matched: int = 0
  gold: int = 0  # Gold constituents scored.
  test: int = 0  # Test constituents scored.
  crossing: int = 0
  words: int = 0  # Words whose tags were compared.
  correct_tags: int = 0
  errors: List[str] = dataclasses.field(default_factory=list)  # EVALB's Error() calls, in order.
  fatal: bool = False  # EVALB could not read a line: it would stop here.

  def row(self) -> str:
    """The line EVALB prints for this sentence."""
    recall = 100.0 * self.matched / self.gold if self.gold else 0.0
    precision = 100.0 * self.matched / self.test if self.test else 0.0
    tags = 100.0 * self.correct_tags / self.words if self.words else 0.0
    return (f"{self.id:4d}  {self.length:3d}    {self.status:d}  {recall:6.2f} {precision:6.2f}"
            f"   {self.matched:3d}    {self.gold:3d}  {self.test:3d}    {self.crossing:3d}"
            f"   {self.words:4d}  {self.correct_tags:4d}   {tags:6.2f}")


def _labels_equal(a: str, b: str, params: EvalbParams) -> bool:
  return a == b or any((a, b) in (pair, pair[::-1]) for pair in params.eq_labels)


def _words_equal(a: str, b: str, params: EvalbParams) -> bool:
  return a == b or any((a, b) in (pair, pair[::-1]) for pair in params.eq_words)


def _massage(line: _Line, params: EvalbParams) -> None:
  """EVALB's `massage_data`: delete empty and DELETE_LABEL constituents, cut function tags."""
  for bracket in line.brackets:
    if bracket.start == bracket.end:
      bracket.deleted = True
      continue
    bracket.label = re.split(r"[-=]", bracket.label, maxsplit=1)[0]
    if any(_labels_equal(bracket.label, d, params) for d in params.delete_labels):
      bracket.deleted = True


def score_sentence(number: int, gold_text: str, test_text: str,
                   params: EvalbParams = COLLINS) -> SentenceResult:
  """EVALB's `calc_result` for one line pair."""
  gold, test = _read_line(gold_text, params), _read_line(test_text, params)
  result = SentenceResult(number, gold.length, 0, errors=gold.errors + test.errors)
  if gold.fatal or test.fatal:
    result.status, result.fatal = 1, True
    result.errors.append(gold.fatal or test.fatal)
    return result
  if result.errors:
    result.status = 1  # Scored below, but counted as an error sentence (EVALB's Status).
  if not test.terminals:
    result.status = 2
    return result
  if len(gold.terminals) != len(test.terminals):
    _fix_quote(gold, test, params)
    if len(gold.terminals) != len(test.terminals):
      result.status = 1
      result.errors.append(f"Length unmatch ({len(gold.terminals)}|{len(test.terminals)})")
      return result
  for (g_word, _), (t_word, _) in zip(gold.terminals, test.terminals):
    if not _words_equal(g_word, t_word, params):
      result.status = 1
      result.errors.append(f"Words unmatch ({g_word}|{t_word})")
      return result
  _massage(gold, params)
  _massage(test, params)
  g_brackets = [b for b in gold.brackets if not b.deleted]
  t_brackets = [b for b in test.brackets if not b.deleted]
  by_span: Dict[Tuple[int, int], List[_Bracket]] = {}
  for b in t_brackets:
    by_span.setdefault((b.start, b.end), []).append(b)
  matched = 0
  for g in g_brackets:
    for t in by_span.get((g.start, g.end), ()):
      if not t.matched and (not params.labeled or _labels_equal(g.label, t.label, params)):
        t.matched = True
        matched += 1
        break
  crossing = sum(
      any((g.start < t.start < g.end < t.end) or (t.start < g.start < t.end < g.end)
          for g in g_brackets)
      for t in t_brackets)
  correct = sum(_labels_equal(g_tag, t_tag, params)
                for (_, g_tag), (_, t_tag) in zip(gold.terminals, test.terminals))
  result.matched, result.gold, result.test = matched, len(g_brackets), len(t_brackets)
  result.crossing, result.words, result.correct_tags = crossing, len(gold.terminals), correct
  return result


@dataclasses.dataclass
class Totals:
  """EVALB's summary block for one group of sentences."""
  sentences: int = 0
  error: int = 0
  skip: int = 0
  matched: int = 0
  gold: int = 0
  test: int = 0
  complete: int = 0
  crossing: int = 0
  no_crossing: int = 0
  two_or_less_crossing: int = 0
  words: int = 0
  correct_tags: int = 0

  def add(self, s: SentenceResult) -> None:
    self.sentences += 1
    if s.status == 1:
      self.error += 1
      return
    if s.status == 2:
      self.skip += 1
      return
    self.matched += s.matched
    self.gold += s.gold
    self.test += s.test
    self.complete += s.gold == s.test == s.matched
    self.crossing += s.crossing
    self.no_crossing += s.crossing == 0
    self.two_or_less_crossing += s.crossing <= 2
    self.words += s.words
    self.correct_tags += s.correct_tags

  @property
  def valid(self) -> int:
    return self.sentences - self.error - self.skip

  @property
  def recall(self) -> float:
    return 100.0 * self.matched / self.gold if self.gold else 0.0

  @property
  def precision(self) -> float:
    return 100.0 * self.matched / self.test if self.test else 0.0

  @property
  def f1(self) -> float:
    p, r = self.precision, self.recall
    return 2 * p * r / (p + r) if p + r else 0.0

  @property
  def complete_match(self) -> float:
    return 100.0 * self.complete / self.valid if self.valid else 0.0

  @property
  def average_crossing(self) -> float:
    return self.crossing / self.valid if self.valid else 0.0

  @property
  def tagging_accuracy(self) -> float:
    return 100.0 * self.correct_tags / self.words if self.words else 0.0

  def summary_lines(self) -> List[str]:
    valid = self.valid
    pct = lambda count: 100.0 * count / valid if valid else 0.0  # noqa: E731
    return [
        f"Number of sentence        = {self.sentences:6d}",
        f"Number of Error sentence  = {self.error:6d}",
        f"Number of Skip  sentence  = {self.skip:6d}",
        f"Number of Valid sentence  = {valid:6d}",
        f"Bracketing Recall         = {self.recall:6.2f}",
        f"Bracketing Precision      = {self.precision:6.2f}",
        f"Bracketing FMeasure       = {self.f1:6.2f}",
        f"Complete match            = {self.complete_match:6.2f}",
        f"Average crossing          = {self.average_crossing:6.2f}",
        f"No crossing               = {pct(self.no_crossing):6.2f}",
        f"2 or less crossing        = {pct(self.two_or_less_crossing):6.2f}",
        f"Tagging accuracy          = {self.tagging_accuracy:6.2f}",
    ]

  def as_dict(self) -> dict:
    return {"sentences": self.sentences, "error": self.error, "skip": self.skip,
            "valid": self.valid, "recall": self.recall, "precision": self.precision,
            "f1": self.f1, "complete_match": self.complete_match,
            "average_crossing": self.average_crossing,
            "no_crossing": 100.0 * self.no_crossing / self.valid if self.valid else 0.0,
            "two_or_less_crossing":
                100.0 * self.two_or_less_crossing / self.valid if self.valid else 0.0,
            "tagging_accuracy": self.tagging_accuracy, "matched": self.matched,
            "gold_brackets": self.gold, "test_brackets": self.test}


@dataclasses.dataclass
class Result:
  """Per-sentence results and the two summaries, as EVALB prints them."""
  params: EvalbParams
  sentences: List[SentenceResult]
  all: Totals
  cutoff: Totals  # Sentences whose gold length <= params.cutoff_len.
  errors_past_max: int = 0  # Errors after the one where EVALB would have stopped.

  def report(self, per_sentence: bool = True) -> str:
    """EVALB's standard output: the sentence table, the totals line, the summary."""
    bar = "=" * 76
    out = []
    if per_sentence:
      out += ["  Sent.                        Matched  Bracket   Cross        Correct Tag",
              " ID  Len.  Stat. Recal  Prec.  Bracket gold test Bracket Words  Tags Accracy",
              bar]
      out += [s.row() for s in self.sentences]
    t = self.all
    totals = (f"                {t.recall:6.2f} {t.precision:6.2f} {t.matched:6d} {t.gold:5d} "
              f"{t.test:5d}  {t.crossing:5d}" if t.gold and t.test else "")
    out += [bar, totals + f"  {t.words:5d} {t.correct_tags:5d}   {t.tagging_accuracy:6.2f}",
            "=== Summary ===", "", "-- All --"] + t.summary_lines()
    out += ["", f"-- len<={self.params.cutoff_len} --"] + self.cutoff.summary_lines()
    return "\n".join(out) + "\n"


def evaluate(gold_lines: Sequence[str], test_lines: Sequence[str],
             params: EvalbParams = COLLINS, stop_at_max_error: bool = True) -> Result:
  """EVALB over aligned gold and test lines (the caller checks the counts agree).

  Errors are logged as EVALB prints them (`LINE : message`). With
  `stop_at_max_error`, the error EVALB would stop at raises `EvalbFatal`.
  """
  if len(gold_lines) != len(test_lines):
    raise EvalbFatal(f"{len(gold_lines)} gold lines but {len(test_lines)} test lines")
  result = Result(params, [], Totals(), Totals())
  error_count = 0
  for number, (gold, test) in enumerate(zip(gold_lines, test_lines), 1):
    sentence = score_sentence(number, gold, test, params)
    for message in sentence.errors:
      logging.warning("%d : %s", number, message)
      error_count += 1
      stops = error_count > params.max_error + 1  # EVALB: if (Error_count++ > Max_error) exit(1).
      if stops or sentence.fatal:
        if stop_at_max_error:
          why = sentence.errors[-1] if sentence.fatal else (
              f"error {error_count} exceeds MAX_ERROR {params.max_error} + 1")
          raise EvalbFatal(f"line {number}: {why}; EVALB stops here without a summary")
        result.errors_past_max += stops
    result.sentences.append(sentence)
    result.all.add(sentence)
    if sentence.length <= params.cutoff_len:
      result.cutoff.add(sentence)
  return result
