"""A trained run's decode pipeline, as t2t-decoder and t2t-exporter load it.

Both commands decode (or export) the same thing: the model rebuilt from the
run's hparams.json, a checkpoint (the newest that verifies, or the one named),
the problem's encoders from --data_dir (checked to be the ones the run was
trained on), and the decode hparams: the problem's defaults under the user's.
"""

from typing import Optional, Tuple

from t2tlite.errors import UserError


def load_pipeline(output_dir: str, problem, data_dir: Optional[str], decode_hparams: str = "",
                  checkpoint_path: Optional[str] = None, hparams_overrides: str = "",
                  hparams_set: Optional[str] = None) -> Tuple[object, str]:
  """(DecodePipeline, checkpoint path) of the run in `output_dir`; one-line errors."""
  from t2tlite import xla_choice
  from t2tlite.decoding.decode_hparams import DecodeHParams
  from t2tlite.decoding.pipeline import DecodePipeline
  from t2tlite.training import run_dir, run_identity

  run_info = run_dir.load_run_info(output_dir)
  hparams = run_dir.load_hparams(output_dir)  # Names the directory when hparams.json is missing.
  saved = run_info.get("hparams_set")
  if hparams_set and saved and hparams_set != saved:
    raise UserError(f"--hparams_set={hparams_set} but {output_dir} was trained with {saved}")
  hp = DecodeHParams().override(problem.default_decode_hparams).override(decode_hparams)
  # The ids the model was trained on must mean the same words here.
  run_identity.check_data(output_dir, run_info, hparams, problem, data_dir)
  xla_choice.request_backend_level(hp.xla_opt_level)  # Before anything in this process compiles.
  model, checkpoint = run_dir.load_model(output_dir, checkpoint_path, hparams_overrides)
  return DecodePipeline(problem, model, hp, data_dir), checkpoint
