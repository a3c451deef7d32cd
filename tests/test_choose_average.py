"""recipes/choose_average.py: dev picks between the last-N and best-N averages; same steps once.

The recipe runs it on real averages and grids (test_recipes.py); here hand-written files
check each rule: the newest average of a directory by step (not by name or time), an
average of steps already listed dropped, the highest dev score chosen with ties to the
first listed, and a one-line refusal for each file at fault.
"""

import json

import pytest

from t2tlite import errors

from tests.helpers import load_script

choose_average = load_script("recipes/choose_average.py")
choose_decode = load_script("recipes/choose_decode.py")


def write_average(directory, step, steps):
  """What averaging.py leaves: ckpt-<step>.index and the json naming the steps averaged."""
  directory.mkdir(parents=True, exist_ok=True)
  (directory / f"ckpt-{step}.index").write_bytes(b"")
  (directory / f"ckpt-{step}.json").write_text(json.dumps({"n": len(steps), "steps": steps}))
  return str(directory / f"ckpt-{step}")


def write_choice(path, checkpoint, scores, chosen=True, metric="bleu"):
  """A choose_decode.py report, written by its own writer, over alphas 0.6, 1.0, ... with these
  dev scores; finished (its best point chosen) unless `chosen` is False."""
  alphas = [round(0.6 + 0.4 * i, 6) for i in range(len(scores))]
  points = [{"name": f"b4.a{alpha:g}", "decode_hparams": f"beam_size=4,alpha={alpha:g}",
             "metrics": {metric: score}, "order": i}
            for i, (alpha, score) in enumerate(zip(alphas, scores))]
  best = choose_decode.best(points, metric) if chosen else None
  choose_decode.write(str(path), {"checkpoint": checkpoint, "split": "dev"}, metric, points, best)
  return str(path)


def test_the_newest_average_is_the_highest_step_not_the_last_name(tmp_path):
  write_average(tmp_path / "averaged", 900, [700, 800, 900])
  newest = write_average(tmp_path / "averaged", 1200, [1000, 1100, 1200])
  assert choose_average.newest_average(str(tmp_path / "averaged")) == newest


def test_an_average_of_steps_already_listed_is_a_candidate_once(tmp_path):
  last = write_average(tmp_path / "averaged", 1200, [1000, 1100, 1200])
  write_average(tmp_path / "averaged_best", 1200, [1000, 1100, 1200])
  dirs = [str(tmp_path / "averaged"), str(tmp_path / "averaged_best")]
  assert choose_average.distinct_candidates(dirs) == [last]
  best = write_average(tmp_path / "averaged_best", 1300, [900, 1000, 1100])
  assert choose_average.distinct_candidates(dirs) == [last, best]


def test_an_ensembles_candidate_is_every_members_newest_average_of_one_kind(tmp_path):
  """Comma-separated directories (the members' averages of one kind) give one candidate, their
  newest averages comma-separated; it repeats another only when every member's does."""
  last = [write_average(tmp_path / f"train.{i}" / "averaged", 1200 + i, [1000 + i, 1200 + i])
          for i in (1, 2)]
  best_1 = write_average(tmp_path / "train.1" / "averaged_best", 1201, [1001, 1201])  # As its last.
  best_2 = write_average(tmp_path / "train.2" / "averaged_best", 1202, [900, 1100])
  kinds = [",".join(str(tmp_path / f"train.{i}" / kind) for i in (1, 2))
           for kind in ("averaged", "averaged_best")]
  assert choose_average.distinct_candidates(kinds) == [",".join(last),
                                                       ",".join([best_1, best_2])]
  write_average(tmp_path / "train.2" / "averaged_best", 1203, [1002, 1202])  # Now both repeat.
  assert choose_average.distinct_candidates(kinds) == [",".join(last)]


def write_checkpoint(directory, step):
  """What the trainer leaves: ckpt-<step>.index, with no averaging json beside it."""
  directory.mkdir(parents=True, exist_ok=True)
  (directory / f"ckpt-{step}.index").write_bytes(b"")
  return str(directory / f"ckpt-{step}")


def test_the_last_checkpoint_comes_after_the_averages_unless_an_average_holds_it_alone(
    tmp_path, capsys):
  """--last_checkpoint adds the run's newest checkpoint by step, listed last; the average of
  that one checkpoint (AVERAGE_LAST_N=1) is the same model, so then it is not repeated."""
  run = tmp_path / "train"
  write_checkpoint(run, 900)
  last = write_checkpoint(run, 1200)
  write_checkpoint(run / "best", 1500)  # Another folder's checkpoints are not the run's.
  averaged = write_average(run / "averaged", 1200, [1000, 1100, 1200])
  assert choose_average.distinct_candidates([str(run / "averaged")], str(run)) == [averaged, last]
  assert choose_average.main(["candidates", str(run / "averaged"),
                              f"--last_checkpoint={run}"]) == 0
  assert capsys.readouterr().out.splitlines() == [averaged, last]
  alone = write_average(run / "averaged", 1300, [1200])
  assert choose_average.distinct_candidates([str(run / "averaged")], str(run)) == [alone]
  with pytest.raises(choose_average.AverageChoiceError, match="empty: no ckpt-<step> checkpoint"):
    choose_average.distinct_candidates([str(run / "averaged")], str(tmp_path / "empty"))


def test_an_ensembles_last_checkpoint_is_every_members_newest(tmp_path):
  members = [tmp_path / f"train.{i}" for i in (1, 2)]
  lasts = [write_checkpoint(member, 1200 + i) for i, member in enumerate(members)]
  write_checkpoint(members[0], 1100)
  averages = [write_average(member / "averaged", 1200 + i, [1100, 1200 + i])
              for i, member in enumerate(members)]
  kinds = [",".join(str(member / "averaged") for member in members)]
  runs = ",".join(map(str, members))
  assert choose_average.distinct_candidates(kinds, runs) == [",".join(averages), ",".join(lasts)]


def test_each_average_with_the_last_checkpoint_comes_after_every_single_model(tmp_path, capsys):
  """--ensemble_with_last pairs each distinct average with the run's newest checkpoint (by step),
  listed after the averages and the last checkpoint alone; an average of that checkpoint alone
  would pair the model with itself, so it gets no pair; an ensemble's runs are refused."""
  run = tmp_path / "train"
  write_checkpoint(run, 900)
  last = write_checkpoint(run, 1200)
  averaged = write_average(run / "averaged", 1200, [1000, 1100, 1200])
  best = write_average(run / "averaged_best", 1200, [800, 900, 1200])
  write_average(run / "averaged_twin", 1200, [1000, 1100, 1200])  # The last N's steps again.
  kinds = [str(run / kind) for kind in ("averaged", "averaged_best", "averaged_twin")]
  assert choose_average.distinct_candidates(kinds, str(run), str(run)) == [
      averaged, best, last, f"{averaged},{last}", f"{best},{last}"]
  assert choose_average.main(["candidates", *kinds, f"--ensemble_with_last={run}"]) == 0
  assert capsys.readouterr().out.splitlines() == [averaged, best, f"{averaged},{last}",
                                                  f"{best},{last}"]
  alone = write_average(run / "averaged", 1300, [1200])
  assert choose_average.distinct_candidates(kinds[:2], None, str(run)) == [
      alone, best, f"{best},{last}"]
  members = f"{run},{tmp_path / 'train.2'}"
  with pytest.raises(choose_average.AverageChoiceError, match="ensemble_with_last=.*one run"):
    choose_average.distinct_candidates(kinds[:1], None, members)


def test_the_highest_dev_score_wins_and_a_tie_goes_to_the_first_listed(tmp_path, capsys):
  last = write_choice(tmp_path / "last.json", "RUN/averaged/ckpt-1200", [40.1, 41.7, 41.2])
  best = write_choice(tmp_path / "best.json", "RUN/averaged_best/ckpt-900", [40.9, 41.9])
  summary = tmp_path / "average_choice.json"
  assert choose_average.main(["pick", last, best, f"--output_json={summary}"]) == 0
  assert capsys.readouterr().out.splitlines() == ["RUN/averaged_best/ckpt-900",
                                                  "beam_size=4,alpha=1"]
  recorded = json.loads(summary.read_text())
  assert [c["dev"] for c in recorded["candidates"]] == [41.7, 41.9]
  assert recorded["chosen"] == "RUN/averaged_best/ckpt-900"
  tied = write_choice(tmp_path / "tied.json", "RUN/averaged_best/ckpt-900", [41.7])
  assert choose_average.main(["pick", last, tied]) == 0
  assert capsys.readouterr().out.splitlines()[0] == "RUN/averaged/ckpt-1200"
  assert choose_average.main(["pick", tied, last]) == 0
  assert capsys.readouterr().out.splitlines()[0] == "RUN/averaged_best/ckpt-900"


def test_each_file_at_fault_is_refused_by_name(tmp_path):
  with pytest.raises(choose_average.AverageChoiceError, match="no averaged ckpt"):
    choose_average.distinct_candidates([str(tmp_path)])
  (tmp_path / "ckpt-5.index").write_bytes(b"")
  with pytest.raises(errors.UserError, match="ckpt-5.json: missing"):
    choose_average.distinct_candidates([str(tmp_path)])
  unfinished = write_choice(tmp_path / "u.json", "RUN/averaged/ckpt-5", [30.0], chosen=False)
  with pytest.raises(choose_average.AverageChoiceError, match="u.json: its dev grid chose no"):
    choose_average.main(["pick", unfinished])
  with pytest.raises(choose_average.AverageChoiceError, match="gone.json: no such"):
    choose_average.main(["pick", str(tmp_path / "gone.json")])
  parse = write_choice(tmp_path / "f1.json", "RUN/averaged/ckpt-5", [80.0], metric="f1")
  bleu = write_choice(tmp_path / "b.json", "RUN/averaged/ckpt-5", [30.0])
  with pytest.raises(choose_average.AverageChoiceError, match="different metrics"):
    choose_average.main(["pick", parse, bleu])
