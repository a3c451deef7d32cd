"""bench/trace_cost.py, and the two things it watches in the trainer's step: one trace (even
with an optimizer not yet built), and Adam's scalars made once per update, not per variable."""

from tests.helpers import load_script, tiny_hparams


def test_the_step_is_traced_once_and_adams_scalars_are_shared_by_its_variables(tmp_path):
  bench = load_script("bench/trace_cost.py")
  result = bench.main(["--shape", "tiny", "--vocab", "20", "--output_json",
                       str(tmp_path / "trace.json")])
  # Traced twice, the ops built would be about twice the ops kept. (Kept counts the loss's
  # functions too, which another test in this process may have traced already.)
  assert result["built"] < 1.2 * result["kept"], result
  kept = result["kept_by_type"]
  assert kept["ResourceApplyAdam"] == result["variables"]  # One fused update per variable...
  assert kept["Pow"] < result["variables"]  # ...but not two powers (b1^t, b2^t) for each.
  assert (tmp_path / "trace.json").exists()


def test_an_optimizer_not_yet_built_does_not_make_the_step_trace_twice():
  import tensorflow as tf
  from t2tlite.models.transformer import Transformer
  from t2tlite.training import optimization, train_step
  bench = load_script("bench/trace_cost.py")
  hp = tiny_hparams(xla=False)
  model, optimizer = Transformer(hp), optimization.make_optimizer(hp)
  assert not optimizer.built
  step = train_step.make_train_step(model, optimizer, hp)
  batch = {"inputs": tf.ones([2, 5], tf.int32), "targets": tf.ones([2, 6], tf.int32)}
  with bench.OpsBuilt() as built:
    train_step.trace_for_any_shape(step, batch)
  kept = sum(bench.ops_kept(step.get_concrete_function(tf.nest.map_structure(
      lambda t: tf.TensorSpec([None, None], t.dtype), batch))).values())
  assert sum(built.by_graph.values()) < 1.2 * kept  # Twice over before (9,952 for 4,668).
