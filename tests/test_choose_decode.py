"""recipes/choose_decode.py: beam size and alpha chosen on dev, resumable, never on test."""

import json
import os

import pytest

from tests.helpers import load_script

choose_decode = load_script("recipes/choose_decode.py")


def point(order, score, name=None):
  return {"name": name or f"p{order}", "order": order, "metrics": {"bleu": score}}


def test_best_is_the_highest_score_and_a_tie_goes_to_the_point_listed_first():
  points = [point(0, 30.0), point(1, 31.5), point(2, 31.5), point(3, 29.0)]
  assert choose_decode.best(points, "bleu")["name"] == "p1"
  assert choose_decode.best([point(0, 5.0), point(1, 5.0)], "bleu")["name"] == "p0"


def test_length_ratio_counts_whitespace_tokens():
  assert choose_decode.length_ratio(["a b", "c"], ["a b c", "d e f"]) == pytest.approx(3 / 6)


def run_choice(tiny_run, output_json, capsys, alphas="0.6,1.0", decode_hparams="extra_length=5",
               **extra):
  argv = ["--problem=algorithmic_reverse", f"--output_dir={tiny_run.output_dir}",
          "--beam_sizes=1,2", f"--alphas={alphas}", f"--decode_hparams={decode_hparams}",
          "--lines=12", f"--output_json={output_json}"]
  argv += [f"--{k}={v}" for k, v in extra.items()]
  assert choose_decode.main(argv) == 0
  return capsys.readouterr().out.strip()


def record_searches(monkeypatch):
  """[(beam size, alphas)] of every search choose_decode.py runs from now on, in order."""
  from t2tlite.decoding import pipeline
  searches = []
  real_decode = pipeline.DecodePipeline.decode_per_alpha

  def recording_decode(self, lines, alphas, *args, **kwargs):
    searches.append((self.hparams.beam_size, list(alphas)))
    return real_decode(self, lines, alphas, *args, **kwargs)
  monkeypatch.setattr(pipeline.DecodePipeline, "decode_per_alpha", recording_decode)
  return searches


def test_every_point_is_scored_on_its_own_decodes_and_the_best_is_printed(tiny_run, tmp_path,
                                                                          capsys):
  from t2tlite import registry
  from t2tlite.metrics import scoring
  out = str(tmp_path / "choice.json")
  printed = run_choice(tiny_run, out, capsys)
  report = json.load(open(out))
  assert [p["name"] for p in report["points"]] == ["b1.a0.6", "b1.a1", "b2.a0.6", "b2.a1"]
  assert report["metric"] == "exact_match" and report["key"]["lines"] == 12
  _, references = registry.problem("algorithmic_reverse").eval_text("dev", None)
  for p in report["points"]:
    with open(os.path.join(tmp_path, f"choice.{p['name']}.txt")) as f:
      decodes = f.read().splitlines()
    assert p["metrics"] == pytest.approx(scoring.score(decodes, references[:12],
                                                       ("exact_match", "bleu")))
  scores = [p["metrics"]["exact_match"] for p in report["points"]]
  first_best = report["points"][scores.index(max(scores))]
  assert report["chosen"] == first_best["name"]
  assert printed == report["decode_hparams"] == first_best["decode_hparams"]
  assert printed.startswith("extra_length=5,beam_size=")


def test_a_rerun_scores_only_the_points_not_yet_saved(tiny_run, tmp_path, capsys, monkeypatch):
  out = str(tmp_path / "choice.json")
  run_choice(tiny_run, out, capsys, alphas="0.6")
  first = json.load(open(out))["points"]
  decoded = record_searches(monkeypatch)
  run_choice(tiny_run, out, capsys, alphas="0.6,1.0")
  assert decoded == [(1, [1.0]), (2, [1.0])]  # Beam 1 and beam 2 at the new alpha only.
  decoded.clear()
  run_choice(tiny_run, str(tmp_path / "fresh.json"), capsys, alphas="0.6,1.0,1.4")
  assert decoded == [(1, [0.6, 1.0, 1.4]), (2, [0.6, 1.0, 1.4])]  # One search per beam size.
  again = {p["name"]: p["metrics"] for p in json.load(open(out))["points"]}
  assert all(again[p["name"]] == p["metrics"] for p in first)


def test_test_split_and_another_runs_json_are_refused(tiny_run, tmp_path, capsys):
  with pytest.raises(choose_decode.ChoiceError, match="--split=test"):
    choose_decode.main(["--problem=algorithmic_reverse", f"--output_dir={tiny_run.output_dir}",
                        "--split=test", f"--output_json={tmp_path / 'c.json'}"])
  out = tmp_path / "choice.json"
  out.write_text(json.dumps({"key": {"checkpoint": "elsewhere"}, "points": []}))
  with pytest.raises(choose_decode.ChoiceError, match="was written for"):
    run_choice(tiny_run, str(out), capsys)


def test_hparams_overrides_reach_the_decoding_model_and_key_the_json(tiny_run, tmp_path, capsys,
                                                                     monkeypatch):
  from t2tlite.decoding import pipeline
  seen = []
  real_decode = pipeline.DecodePipeline.decode_per_alpha
  def recording_decode(self, *args, **kwargs):
    model = self.decoder.model
    seen.append((model.hparams.dtype, model.decoder_layers[0].dtype_policy.compute_dtype))
    return real_decode(self, *args, **kwargs)
  monkeypatch.setattr(pipeline.DecodePipeline, "decode_per_alpha", recording_decode)
  out = str(tmp_path / "choice.json")
  run_choice(tiny_run, out, capsys, alphas="0.6", hparams="dtype=mixed_bfloat16")
  assert seen == [("mixed_bfloat16", "bfloat16")] * 2  # Beams 1 and 2.
  assert json.load(open(out))["key"]["hparams"] == "dtype=mixed_bfloat16"
  with pytest.raises(choose_decode.ChoiceError, match="was written for"):
    run_choice(tiny_run, out, capsys, alphas="0.6")  # The same json without the override.


def grid_point(beam_size, alpha, score):
  return {"name": choose_decode.point_name(beam_size, alpha), "beam_size": beam_size,
          "alpha": alpha, "metrics": {"bleu": score}}


@pytest.mark.parametrize("peak, limit", [(0.7, 5), (1.45, 5), (2.5, 3), (1.0, 0)])
def test_the_edge_is_extended_while_it_wins_and_stops_where_a_dense_search_peaks(peak, limit):
  """A single-peaked score of alpha (beam 4 better than beam 1 everywhere): extending from a
  0.6..1.0 grid finds the grid alpha a brute-force search over the same lattice, capped at
  `limit` steps past the edge, finds; an interior peak costs no decode."""
  def value(beam_size, alpha):
    return -abs(alpha - peak) + (0.5 if beam_size == 4 else 0.0)
  tried = []
  def score(beam_size, alpha, extra_length):
    assert extra_length is None  # A grid without --extra_lengths.
    tried.append((beam_size, alpha))
    point = grid_point(beam_size, alpha, value(beam_size, alpha))
    point["order"] = len(points)
    return point
  points = [dict(grid_point(b, a, value(b, a)), order=i) for i, (b, a) in
            enumerate((b, a) for b in (1, 4) for a in (0.6, 0.8, 1.0))]
  chosen = choose_decode.extend_at_edge(points, "bleu", score, 0.2, limit)
  lattice = [round(0.6 + 0.2 * i, 6) for i in range(3 + limit)]
  expected = max(lattice, key=lambda a: (value(4, a), -a))  # A tie goes to the smaller alpha.
  assert (chosen["beam_size"], chosen["alpha"]) == (4, expected)
  assert tried == [(4, a) for a in lattice[3:] if a <= expected + 0.2 + 1e-9][:limit]
  assert all(p["order"] == i for i, p in enumerate(points))


def test_alpha_step_is_the_grids_last_step():
  assert choose_decode.alpha_step([0.6, 0.8, 1.0, 1.2, 1.4, 1.6]) == 0.2
  assert choose_decode.alpha_step([1.0, 0.5]) == 0.5
  assert choose_decode.alpha_step([0.6]) == 0.2


def test_extend_alphas_decodes_the_winning_beam_one_step_past_the_edge(tiny_run, tmp_path,
                                                                       capsys):
  from t2tlite import registry
  from t2tlite.metrics import scoring
  out = str(tmp_path / "choice.json")
  run_choice(tiny_run, out, capsys, alphas="0.6")
  grid = json.load(open(out))["points"]
  winner = choose_decode.best(grid, "exact_match")
  printed = run_choice(tiny_run, out, capsys, alphas="0.6", extend_alphas=1)
  report = json.load(open(out))
  assert [p["name"] for p in report["points"]] == (
      [p["name"] for p in grid] + [f"b{winner['beam_size']}.a0.8"])
  extra = report["points"][-1]
  _, references = registry.problem("algorithmic_reverse").eval_text("dev", None)
  with open(os.path.join(tmp_path, f"choice.{extra['name']}.txt")) as f:
    decodes = f.read().splitlines()
  assert extra["metrics"] == pytest.approx(scoring.score(decodes, references[:12],
                                                         ("exact_match", "bleu")))
  assert printed == choose_decode.best(report["points"], "exact_match")["decode_hparams"]
  with pytest.raises(choose_decode.ChoiceError, match="--extend_alphas=-1"):
    run_choice(tiny_run, out, capsys, alphas="0.6", extend_alphas=-1)


def test_alphas_past_the_edge_ride_along_with_their_line_s_search(tiny_run, tmp_path, capsys,
                                                                   monkeypatch):
  """With --extend_alphas each line's one search also decodes the alphas its edge may be
  extended to: no search of their own, and the same points, decodes and choice as a grid
  scored first and extended by a rerun (which decodes the new alpha alone)."""
  stepwise = str(tmp_path / "stepwise.json")
  run_choice(tiny_run, stepwise, capsys, alphas="0.6")
  expected = run_choice(tiny_run, stepwise, capsys, alphas="0.6", extend_alphas=1)
  searches = record_searches(monkeypatch)
  at_once = str(tmp_path / "at_once.json")
  assert run_choice(tiny_run, at_once, capsys, alphas="0.6", extend_alphas=1) == expected
  assert searches == [(1, [0.6, 0.8]), (2, [0.6, 0.8])]
  want, got = json.load(open(stepwise)), json.load(open(at_once))
  assert [p["name"] for p in got["points"]] == [p["name"] for p in want["points"]]
  assert [p["metrics"] for p in got["points"]] == [p["metrics"] for p in want["points"]]
  assert got["chosen"] == want["chosen"]
  for p in got["points"]:  # Only the points listed leave their decodes beside the json.
    with open(tmp_path / f"stepwise.{p['name']}.txt") as a, \
         open(tmp_path / f"at_once.{p['name']}.txt") as b:
      assert a.read() == b.read()
  assert len(list(tmp_path.glob("at_once.*.txt"))) == len(got["points"])


def test_point_names_carry_the_extra_length_only_in_an_extra_lengths_grid():
  assert choose_decode.point_name(4, 0.6) == "b4.a0.6"
  assert choose_decode.point_name(8, 1.6, 20) == "b8.a1.6.x20"
  assert choose_decode.point_name(8, 1.0, 0) == "b8.a1.x0"


def test_the_edge_is_extended_along_the_winners_extra_length_only():
  """Two lines of the grid, +50 and +10, each single-peaked in alpha: the search goes past
  the edge of the winning line only, and finds what a brute-force search of that line finds;
  the other line's edge (also its best) is never extended."""
  peaks, bonus = {50: 2.0, 10: 1.5}, {50: 0.0, 10: 0.3}
  def value(extra_length, alpha):
    return -abs(alpha - peaks[extra_length]) + bonus[extra_length]
  def make(beam_size, alpha, extra_length, order):
    return {"name": choose_decode.point_name(beam_size, alpha, extra_length),
            "beam_size": beam_size, "alpha": alpha, "extra_length": extra_length,
            "metrics": {"bleu": value(extra_length, alpha)}, "order": order}
  points = [make(4, a, x, i) for i, (x, a) in
            enumerate((x, a) for x in (50, 10) for a in (0.6, 0.8, 1.0))]
  tried = []
  def score(beam_size, alpha, extra_length):
    tried.append((beam_size, alpha, extra_length))
    return make(beam_size, alpha, extra_length, len(points))
  chosen = choose_decode.extend_at_edge(points, "bleu", score, 0.2, 5)
  lattice = [round(0.6 + 0.2 * i, 6) for i in range(8)]
  best_alpha = {x: max(lattice, key=lambda a: (value(x, a), -a)) for x in (50, 10)}
  expected = max((value(x, best_alpha[x]), x) for x in (50, 10))[1]
  assert expected == 10 and best_alpha[10] == 1.4  # 0.3 above the +50 line's peak.
  assert (chosen["extra_length"], chosen["alpha"]) == (10, 1.4)
  assert tried == [(4, 1.2, 10), (4, 1.4, 10), (4, 1.6, 10)]


def test_extra_lengths_are_a_grid_dimension_and_bound_every_decode(tiny_run, tmp_path, capsys):
  """--extra_lengths=5,0: every (beam, alpha) at +5, then at +0, the first listed first; each
  point scored on its own decodes, and no decode at +0 longer than its source."""
  from t2tlite import registry
  from t2tlite.metrics import scoring
  out = str(tmp_path / "choice.json")
  printed = run_choice(tiny_run, out, capsys, decode_hparams="", extra_lengths="5,0")
  report = json.load(open(out))
  assert [p["name"] for p in report["points"]] == [
      f"b{b}.a{a}.x{x}" for x in (5, 0) for b in (1, 2) for a in ("0.6", "1")]
  sources, references = registry.problem("algorithmic_reverse").eval_text("dev", None)
  for p in report["points"]:
    assert p["decode_hparams"].startswith(f"extra_length={p['extra_length']},beam_size=")
    with open(os.path.join(tmp_path, f"choice.{p['name']}.txt")) as f:
      decodes = f.read().splitlines()
    assert p["metrics"] == pytest.approx(scoring.score(decodes, references[:12],
                                                       ("exact_match", "bleu")))
    if p["extra_length"] == 0:
      assert all(len(d.split()) <= len(s.split()) for d, s in zip(decodes, sources))
  chosen = choose_decode.best(report["points"], "exact_match")
  assert printed == report["decode_hparams"] == chosen["decode_hparams"]
  with pytest.raises(choose_decode.ChoiceError, match="both set extra_length"):
    run_choice(tiny_run, str(tmp_path / "other.json"), capsys, extra_lengths="5,0")
  with pytest.raises(choose_decode.ChoiceError, match="--extra_lengths=.*0 or more"):
    run_choice(tiny_run, str(tmp_path / "other.json"), capsys, decode_hparams="",
               extra_lengths="5,-1")
