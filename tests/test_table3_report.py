"""recipes/table3_report.py and the sweep's plan (recipes/table3_sweep.py) on synthetic results.

Nothing trains here: results are JSON files written by hand, verdicts are
checked against cases small enough to compute by hand, and the sweep's
progress parsing against the trainer's own progress line.
"""

import json
import os

import pytest

from t2tlite.hparams.table3 import TABLE3
from t2tlite.training.progress import progress_line
from tests.helpers import load_script

report = load_script("recipes/table3_report.py")
sweep = load_script("recipes/table3_sweep.py")

PAPER_LAYOUT = ["N", "d_model", "d_ff", "h", "d_k", "d_v", "P_drop", "eps_ls", "train steps",
                "PPL (dev)", "BLEU (dev)", "params x10^6"]


def result(short, ppl, bleu, seed=1, steps=1000, params=2_000_000):
  mini_set = "transformer_table3_" + short
  name = f"{short}.seed{seed}" if short == "base" else short
  return {"name": name, "mini_set": mini_set, "seed": seed, "steps": steps,
          "target_steps": 1000, "dev_ppl": ppl, "bleu": bleu, "params": params,
          "train_seconds": 600.0, "stopped_by_time_bound": steps < 1000}


# Base seeds PPL 5, 6, 7 (sample std 1.0, noise 2.0) and BLEU 30, 31, 32 (std 1.0, noise 2.0).
BASE = [result("base", 5.0 + i, 30.0 + i, seed=i + 1) for i in range(3)]


@pytest.mark.parametrize("delta, expected, lower, want", [
    (2.5, "worse", True, "reproduced"),  # PPL up by more than the noise: worse, as claimed.
    (-2.5, "worse", True, "reversed"),
    (2.0, "worse", True, "reproduced"),  # |delta| == noise is not below it.
    (1.5, "worse", True, "within seed noise"),
    (-1.99, "worse", False, "within seed noise"),
    (-3.0, "worse", False, "reproduced"),  # BLEU down: worse.
    (3.0, "better", False, "reproduced"),
    (-2.5, "better", True, "reproduced"),  # PPL down: better.
    (0.5, "same", True, "reproduced"),
    (-2.5, "same", False, "not reproduced"),
    (None, "worse", True, "not run"),
])
def test_verdict_rule(delta, expected, lower, want):
  assert report.verdict(delta, 2.0, expected, lower) == want


def test_verdict_without_a_spread():
  assert report.verdict(1.0, None, "worse", True) == "no seed spread"


def test_spread_is_the_sample_standard_deviation_of_the_base_seeds():
  assert report.spread(BASE) == {"ppl": 1.0, "bleu": 1.0}
  assert report.spread(BASE[:1]) == {"ppl": None, "bleu": None}


def test_claims_on_hand_computed_figures():
  # base mean: PPL 6, BLEU 31; noise 2 on both.
  rows = BASE + [result("h1", 9.0, 27.0), result("h4", 5.5, 31.5), result("h16", 6.2, 30.0),
                 result("h32", 7.0, 30.5), result("ls0", 3.0, 28.5), result("posemb", 6.5, 30.0),
                 result("dk16", 8.5, 31.0), result("dk32", 4.0, 31.0)]
  figures = {s: report.ours(r) for s, r in report.by_set(rows).items()}
  judged = {j["claim"].id: j for j in report.judge(figures, {"ppl": 2.0, "bleu": 2.0})}
  heads_one = judged["heads_one"]["rows"][0]
  assert heads_one["ppl"] == pytest.approx(9.0 - 5.5)  # Against the best: h4.
  assert heads_one["bleu"] == pytest.approx(27.0 - 31.5)
  assert heads_one["paper_bleu"] == pytest.approx(24.9 - 25.8)  # The paper's 0.9.
  assert judged["heads_one"]["verdict"] == "reproduced"
  assert judged["heads_many"]["rows"][0]["ppl"] == pytest.approx(1.5)
  assert judged["heads_many"]["verdict"] == "within seed noise"
  assert [r["verdict_ppl"] for r in judged["d_k"]["rows"]] == ["reproduced", "reversed"]
  assert judged["d_k"]["verdict"] == "mixed (1 reproduced, 1 reversed)"
  ls = judged["label_smoothing"]  # PPL 3 vs 6: better without; BLEU 28.5 vs 31: worse.
  assert (ls["rows"][0]["verdict_ppl"], ls["rows"][0]["verdict_bleu"]) == ("reproduced",
                                                                          "reproduced")
  assert ls["verdict"] == "reproduced"
  assert judged["positions"]["verdict"] == "reproduced"  # 0.5 PPL apart: within noise.
  assert judged["dropout"]["verdict"] == "not run"
  assert judged["bigger"]["verdict"] == "not run"


def _write_run(tmp_path, results, rows):
  run_dir = tmp_path / "run"
  (run_dir / "results").mkdir(parents=True)
  for r in results:
    (run_dir / "results" / f"{r['name']}.json").write_text(json.dumps(r))
  settings = {"steps": 1000, "rows": rows, "base_seeds": 3, "cores": "0,1"}
  (run_dir / "sweep.json").write_text(json.dumps(
      {"settings": settings, "sessions": [{"start": 0.0, "end": 7200.0}]}))
  return str(run_dir)


def _table(text):
  lines = text.splitlines()
  start = next(i for i, l in enumerate(lines) if l.startswith("| | N |"))
  table = []
  for line in lines[start:]:
    if not line.startswith("|"):
      break
    table.append([c.strip() for c in line.strip().strip("|").split("|")])
  return table[0], table[2:]


def test_page_has_the_papers_layout_and_figures(tmp_path, monkeypatch):
  monkeypatch.setattr(report, "computed_params", lambda sets, vocab: {s: 1_234_567 for s in sets})
  rows = [r.mini_set for r in TABLE3 if r.row != "big"]
  results = BASE + [result("h1", 9.0, 27.0), result("d1024", 5.0, 33.0, params=6_000_000),
                    result("n8", 5.9, 31.2, steps=700)]
  run_dir = _write_run(tmp_path, results, rows)
  out, figure = str(tmp_path / "table3.md"), str(tmp_path / "img" / "table3.png")
  assert report.main([run_dir, f"--output={out}", f"--figure={figure}"]) == 0
  text = open(out).read()
  header, body = _table(text)
  assert header[1:13] == PAPER_LAYOUT
  assert header[13:16] == ["paper PPL", "paper BLEU", "paper params x10^6"]
  assert len(body) == len(rows)  # One line per row of the sweep, in Table 3's order.
  cells = {r.mini_set: line for r, line in zip([r for r in TABLE3 if r.row != "big"], body)}
  base = cells["transformer_table3_base"]
  assert base[0] == "base" and base[1:9] == ["3", "128", "512", "8", "16", "16", "0.1", "0.1"]
  assert base[9] == "1000"
  assert base[10] == "6.00 ±1.00" and base[11] == "31.0 ±1.0"
  assert base[13:16] == ["4.92", "25.8", "65"]
  h1 = cells["transformer_table3_h1"]
  assert h1[0] == "(A)" and h1[1:9] == ["", "", "", "1", "128", "128", "", ""]
  assert h1[10:12] == ["9.00", "27.0"] and h1[13:16] == ["5.29", "24.9", ""]
  d1024 = cells["transformer_table3_d1024"]
  assert d1024[1:9] == ["", "256", "", "", "32", "32", "", ""] and d1024[12] == "6.00"
  assert cells["transformer_table3_n8"][9] == "700 (time bound)"
  assert cells["transformer_table3_h4"][10:13] == ["-", "-", "1.23"]  # Not run yet: computed.
  assert "Stopped by the time bound before their steps: n8." in text
  assert "wall time 2.00 h" in text
  assert "6 of 21 runs finished" in text
  assert "has not been run" not in text
  with open(figure, "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n"
  assert "](img/table3.png)" in text


def test_page_before_the_sweep_says_so_with_no_figures_of_ours(tmp_path, monkeypatch):
  monkeypatch.setattr(report, "computed_params", lambda sets, vocab: {s: 1_234_567 for s in sets})
  out = str(tmp_path / "table3.md")
  assert report.main([str(tmp_path / "nothing"), f"--output={out}",
                      f"--figure={tmp_path / 'f.png'}"]) == 0
  text = open(out).read()
  assert "**The sweep has not been run yet.**" in text
  _, body = _table(text)
  assert len(body) == len(TABLE3)
  assert all(line[10:12] == ["-", "-"] and line[12] == "1.23" for line in body)
  assert not os.path.exists(tmp_path / "f.png")


def test_page_refuses_to_overwrite_what_it_did_not_write(tmp_path):
  out = tmp_path / "table3.md"
  out.write_text("my own notes\n")
  with pytest.raises(report.ReportError, match="was not written by this script"):
    report.main([str(tmp_path / "nothing"), f"--output={out}"])


def test_notes_explain_claims_by_id(tmp_path):
  notes = tmp_path / "notes.md"
  notes.write_text("# why\ndropout: 1000 steps are too few to over-fit.\n")
  assert report.read_notes(str(notes)) == {"dropout": "1000 steps are too few to over-fit."}
  notes.write_text("dropuot: typo\n")
  with pytest.raises(report.ReportError, match=r"notes.md:1: expected 'id: text'"):
    report.read_notes(str(notes))


# --- The sweep's plan, resumption and progress ---
def test_plan_has_every_row_once_and_the_base_three_times_longest_first():
  runs = sweep.plan(sweep.DEFAULT_ROWS, 3, 1000)
  names = [r.name for r in runs]
  assert len(names) == len(set(names)) == 21
  assert sorted(n for n in names if n.startswith("base")) == ["base.seed1", "base.seed2",
                                                               "base.seed3"]
  assert "big" not in names and {r.steps for r in runs} == {1000}
  assert [r.cost * r.steps for r in runs] == sorted((r.cost * r.steps for r in runs),
                                                    reverse=True)
  big = sweep.plan(["transformer_table3_big"], 3, 1000)
  assert [(r.name, r.steps) for r in big] == [("big", 3000)]  # The paper's 300K against 100K.


def test_relative_cost_doubles_width_about_two_and_a_half_times():
  cost = lambda name: sweep.relative_cost(sweep.set_hparams(name))  # noqa: E731
  assert cost("transformer_table3_base") == 1.0
  assert 2.3 < cost("transformer_table3_d1024") < 2.7  # ISSUE: d_model doubled ~2.4x per step.
  assert cost("transformer_table3_n2") < cost("transformer_table3_n4") < 1.0


def test_a_rerun_runs_only_what_has_no_results(tmp_path):
  runs = sweep.plan(["transformer_table3_base", "transformer_table3_h1"], 3, 10)
  os.makedirs(tmp_path / "results")
  (tmp_path / "results" / "base.seed2.json").write_text("{}")
  (tmp_path / "results" / "h1.json").write_text("{}")
  assert sorted(r.name for r in sweep.unfinished(runs, str(tmp_path))) == ["base.seed1",
                                                                           "base.seed3"]


def test_a_rerun_with_other_steps_is_refused(tmp_path):
  settings = {"steps": 1000, "hparams": "xla=false", "decode_hparams": sweep.DECODE_HPARAMS,
              "problem": sweep.PROBLEM, "data_dir": "d", "rows": ["a"]}
  sweep.write_json(str(tmp_path / "sweep.json"), sweep.check_settings(str(tmp_path), settings))
  again = sweep.check_settings(str(tmp_path), dict(settings, rows=["b"]))
  assert again["settings"]["rows"] == ["a", "b"]  # More rows may join a sweep.
  with pytest.raises(sweep.SweepError, match="started with steps=1000, not 2000"):
    sweep.check_settings(str(tmp_path), dict(settings, steps=2000))


def test_stages_decode_dev_only_with_the_papers_search(tmp_path):
  args = sweep.parse_args([f"--run_dir={tmp_path}"])
  run = sweep.plan(["transformer_table3_h1"], 1, 1000)[0]
  stages = sweep.stage_commands(run, args)
  assert list(stages) == ["train", "decode", "bleu", "collect"]
  train = stages["train"]
  assert "--train_steps=1000" in train and "--hparams_set=transformer_table3_h1" in train
  assert "--eval_steps=0" in train and "--noeval_decode" in train  # All of dev, no decode.
  decode = stages["decode"]
  assert "--decode_split=dev" in decode
  assert "--decode_hparams=beam_size=4,alpha=0.6,extra_length=50" in decode
  args_seen = [arg.replace(str(tmp_path), "RUN") for stage in stages.values() for arg in stage]
  assert not any("test" in arg for arg in args_seen), args_seen  # Test is never decoded.
  pinned = sweep.pinned("1", train)
  assert pinned[pinned.index("taskset"):][:3] == ["taskset", "-c", "1"]
  assert "TF_NUM_INTRAOP_THREADS=1" in pinned


def test_progress_reads_the_trainers_own_line(tmp_path):
  metrics = {"seconds": 10.0, "tokens": 20000.0, "loss": 3.0, "nll": 2.9, "perplexity": 18.2,
             "accuracy": 0.4}
  log = tmp_path / "train.log"
  log.write_text("I1123 trainer.py] " + progress_line(200, 1000, metrics, 0.001, 100) + "\n"
                 + "I1123 trainer.py] " + progress_line(300, 1000, metrics, 0.001, 100) + "\n")
  assert sweep.trainer_progress(str(log)) == (300, 700 * 0.1)
  assert sweep.trainer_progress(str(tmp_path / "none.log")) == (None, None)


# --- The real-shape rows (recipes/table3_gpu.py): their section of the page ---
gpu = load_script("recipes/table3_gpu.py")


def gpu_result(name, hparams_set, ppl, bleu, seed=1, d_model=512, h=8, params=48_000_000,
               extra=""):
  return {"name": name, "hparams_set": hparams_set, "seed": seed, "steps": 3000,
          "row_hparams": gpu.ROW_HPARAMS + ("," + extra if extra else ""),
          "target_steps": 3000, "stopped_by_time_bound": False, "dev_ppl": ppl, "bleu": bleu,
          "params": params, "seconds": 120.0, "device": "NVIDIA H100 80GB HBM3",
          "shape": {"N": 6, "d_model": d_model, "d_ff": 2048, "h": h, "d_k": d_model // h,
                    "d_v": d_model // h, "P_drop": 0.1, "eps_ls": 0.1}}


def test_real_shape_section_has_the_layout_the_spread_and_the_verdicts():
  rows = [gpu_result(f"base.seed{i + 1}", "transformer_base", 5.0 + i, 30.0 + i, seed=i + 1)
          for i in range(3)]  # PPL std 1.0, noise 2.0; BLEU std 1.0, noise 2.0.
  rows += [gpu_result("h1", "transformer_base_h1", 9.0, 27.0, h=1),
           gpu_result("d1024", "transformer_base_d1024", 5.5, 31.5, d_model=1024,
                      params=150_000_000)]
  text = gpu.section(rows)
  assert text.startswith(report.KEPT_SECTION[0]) and text.endswith(report.KEPT_SECTION[1])
  header, body = _table(text)
  assert header[1:13] == PAPER_LAYOUT
  base, h1, d1024 = body[:3]
  assert base[0] == "base" and base[1:9] == ["6", "512", "2048", "8", "64", "64", "0.1", "0.1"]
  assert base[9:13] == ["3000", "6.00 ±1.00", "31.0 ±1.0", "48.0"]
  assert base[13:16] == ["4.92", "25.8", "65"]
  assert h1[0] == "(A)" and h1[1:9] == ["", "", "", "1", "512", "512", "", ""]
  assert d1024[0] == "(C)" and d1024[2] == "1024" and d1024[12] == "150.0"
  claims = {}
  for line in text.splitlines():
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if len(cells) == 8 and " vs " in cells[1] and cells[0] != "claim":
      claims[cells[1]] = cells
  assert set(claims) == {"h1 vs base", "d1024 vs base"}  # Only comparisons of rows run.
  # h1 against the base (the best of the heads rows present): PPL +3.0 >= noise 2.0 and
  # BLEU -4.0: worse, as claimed.
  assert claims["h1 vs base"][2:8] == ["+0.37", "-0.9", "+3.00", "-4.00", "reproduced",
                                       "reproduced"]
  # d1024 against the base: PPL -0.5 and BLEU +0.5 are within the noise.
  assert claims["d1024 vs base"][4:8] == ["-0.50", "+0.50", "within seed noise",
                                          "within seed noise"]
  assert "no verdicts" not in text
  assert "Other settings" not in text


def test_runs_with_other_settings_get_their_own_table_against_their_own_base():
  extra = "learning_rate_warmup_steps=4000"
  rows = [gpu_result("base.seed1", "transformer_base", 7.0, 33.0),
          gpu_result("base.seed1.w4000", "transformer_base", 6.5, 36.0, extra=extra),
          gpu_result("d1024.w4000", "transformer_base_d1024", 7.0, 34.5, d_model=1024,
                     extra=extra)]
  text = gpu.section(rows, {"real_shapes.variations": "Why the warmup.",
                            "real_shapes.heads_one": "Not shown: h1 did not run."})
  _, body = _table(text)
  assert len(body) == 1  # The main table holds the rows' own settings only.
  variations = text.split("### Other settings")[1]
  lines = [l for l in variations.splitlines() if l.startswith("| d1024.w4000")]
  assert lines and "`learning_rate_warmup_steps=4000`" in lines[0]
  assert lines[0].rstrip(" |").endswith("+0.50 | -1.50")  # Against base.seed1.w4000, not base.
  assert "Why the warmup." in variations
  assert "Not shown" not in text  # A note only for claims judged here.


def test_regenerating_the_page_keeps_the_real_shape_section(tmp_path, monkeypatch):
  monkeypatch.setattr(report, "computed_params", lambda sets, vocab: {s: 1_234_567 for s in sets})
  out = str(tmp_path / "table3.md")
  assert report.main([str(tmp_path / "nothing"), f"--output={out}"]) == 0
  section = gpu.section([gpu_result("base.seed1", "transformer_base", 5.0, 30.0)])
  gpu.write_section(out, section)
  assert report.main([str(tmp_path / "nothing"), f"--output={out}"]) == 0
  text = open(out).read()
  assert text.count(report.KEPT_SECTION[0]) == 1 and section in text
  assert "one seed: no spread, so no verdicts" in text
  gpu.write_section(out, section.replace("5.00", "4.00"))  # Replaced, not added.
  assert open(out).read().count(report.KEPT_SECTION[0]) == 1
