"""A trained run's decode pipeline, as t2t-decoder and t2t-exporter load it.

Both commands decode (or export) the same thing: the model rebuilt from the
run's hparams.json, a checkpoint (the newest that verifies, or the one named),
the problem's encoders from --data_dir (checked to be the ones the run was
trained on), and the decode hparams: the problem's defaults under the user's.
t2t-decoder (and recipes/choose_decode.py) also load several runs as one ensemble.
"""

from typing import List, Optional, Tuple

from t2tlite.errors import UserError


def load_pipeline(output_dir: str, problem, data_dir: Optional[str], decode_hparams: str = "",
                  checkpoint_path: Optional[str] = None, hparams_overrides: str = "",
                  hparams_set: Optional[str] = None) -> Tuple[object, str]:
  """(DecodePipeline, checkpoint path) of the run in `output_dir`; one-line errors.

  `output_dir` may name several runs, comma-separated: they decode as one ensemble
  (decoding/ensemble.py), each checked against --data_dir's vocabulary; then
  `checkpoint_path` is empty (each run's newest) or names one checkpoint per run, in
  the same order, and the returned path lists the checkpoints loaded, comma-separated.
  """
  from t2tlite import xla_choice
  from t2tlite.decoding.decode_hparams import DecodeHParams
  from t2tlite.decoding.ensemble import Ensemble
  from t2tlite.decoding.pipeline import DecodePipeline

  named = check_runs(output_dir, checkpoint_path, hparams_set)
  hp = DecodeHParams().override(problem.default_decode_hparams).override(decode_hparams)
  xla_choice.request_backend_level(hp.xla_opt_level)  # Before anything in this process compiles.
  loaded = [_load_run(run, problem, data_dir, path, hparams_overrides)
            for run, path in named]
  models = [model for model, _ in loaded]
  model = models[0] if len(models) == 1 else Ensemble(models)
  return DecodePipeline(problem, model, hp, data_dir), ",".join(path for _, path in loaded)


def check_runs(output_dir: str, checkpoint_path: Optional[str] = None,
               hparams_set: Optional[str] = None) -> List[Tuple[str, Optional[str]]]:
  """[(run directory, checkpoint prefix or None: its newest)] of --output_dir and
  --checkpoint_path, checked for every mistake that needs no model.

  Needs neither the problem nor TensorFlow, so t2t-decoder and t2t-exporter ask it before
  they load either: a wrong directory, checkpoint or --hparams_set is then a one-line
  error in a moment rather than after TensorFlow's start-up. (--problem is checked once
  the problem has loaded: an alias or a --t2t_usr_dir problem is known only then.)
  load_pipeline asks it too, for every other caller.
  """
  from t2tlite.training import resume, run_dir

  runs = split_runs(output_dir)
  paths = [None] * len(runs)
  if checkpoint_path:
    paths = checkpoint_path.split(",")
    if len(paths) != len(runs):
      raise UserError(f"--checkpoint_path names {len(paths)} checkpoint(s) for "
                      f"{len(runs)} run(s) in --output_dir: one per run, in the same order")
  named = []
  for run, path in zip(runs, paths):
    run_dir.load_hparams(run)  # Names the directory when hparams.json is missing.
    run_info = run_dir.load_run_info(run)
    saved = run_info.get("hparams_set")
    if hparams_set and saved and hparams_set != saved:
      raise UserError(f"--hparams_set={hparams_set} but {run} was trained with {saved}")
    named.append((run, path and resume.resolve_checkpoint_path(path)))
  return named


def split_runs(output_dir: str):
  """The run directories of --output_dir: one, or several comma-separated (an ensemble).

  The one reading of the comma: t2t-decoder and t2t-exporter ask it too."""
  runs = output_dir.split(",")
  if not all(runs):
    raise UserError(f"--output_dir={output_dir}: an empty run directory in the list")
  return runs


def _load_run(output_dir: str, problem, data_dir, checkpoint_path, hparams_overrides):
  """(model, checkpoint path) of one run (check_runs has checked it), checked against the
  data it will decode."""
  from t2tlite.training import run_dir, run_identity

  run_info = run_dir.load_run_info(output_dir)
  hparams = run_dir.load_hparams(output_dir)
  # The ids the model was trained on must mean the same words here.
  run_identity.check_data(output_dir, run_info, hparams, problem, data_dir)
  return run_dir.load_model(output_dir, checkpoint_path, hparams_overrides)
