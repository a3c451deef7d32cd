r"""Chooses the beam size and length penalty (alpha) on the dev split, as the paper did.

  python recipes/choose_decode.py --problem=multi30k_ende --data_dir=OUT/data \
      --output_dir=OUT/train --checkpoint_path=OUT/train/averaged/ckpt-3000 \
      --beam_sizes=4 --alphas=0.6,0.8,1.0,1.2,1.4,1.6 --decode_hparams=extra_length=50 \
      --output_json=OUT/dev_choice.ckpt-3000.json
  # prints the winner, e.g. "extra_length=50,beam_size=4,alpha=1.4", for t2t-decoder

The paper's beam 4 / alpha 0.6 "were chosen after experimentation on the
development set" (Section 6.1) of WMT14. On another corpus the same
experiment gives other values: on Multi30k, decodes with alpha 0.6 are 4-10%
shorter than the references, and the brevity penalty costs about a BLEU
point. This script runs that experiment: the model is loaded once, every
(beam size, alpha) of the grid decodes the whole dev split (or its first
--lines), and each is scored with the problem's own first metric (sacreBLEU
for translation, EVALB F1 for parsing). The best wins; a tie goes to the
point listed first, so list the paper's values first. Test is never read.

A best alpha at the grid's upper edge says the grid stopped too soon (a
model that writes short outputs wants a stronger length reward), so with
--extend_alphas=N the winner's beam size is tried at the next alphas, one
grid step further each time (the step of the last two listed, 0.2 for a
single alpha), while the newest edge keeps winning, N at most. Still dev
only, and a tie still goes to the smaller alpha.

--extra_lengths makes the longest output one more dimension of the grid:
each sentence may write its source length + N tokens (the paper's +50 by
default, through --decode_hparams). At the large alphas a short-writing model
wants, a few sentences run on towards that limit, repeating phrases (a
Multi30k en-de model at beam 8 on val: 9 of 1014 decodes longer than the
reference by 8 words or more at alpha 1.6, 28 at 1.8, where BLEU fell by 2);
a tighter limit cuts them short, and the end forced there scores low against
the beams that ended on their own. List the paper's 50 first: a tie goes to it.

The alive hypotheses of beam search are ranked by log-probability alone, so
alpha only decides which finished hypotheses are kept: each (beam size,
extra length) line of the grid is decoded by one search that keeps a
finished set per alpha, and each point gets exactly the decode a search
with its alpha alone gives (t2tlite/decoding/search.py). A line of eight
alphas costs about one decode at its largest alpha instead of eight.

Each point's result is saved to --output_json as soon as it is scored, with
the checkpoint it came from; a rerun (same checkpoint and lines) scores only
the points not yet there. Decodes go beside the json (<json stem>.b4.a0.6.txt).
"""

import argparse
import itertools
import json
import os
import sys
from typing import Dict, List, Optional, Sequence

from t2tlite import cli, errors, files, registry


class ChoiceError(errors.UserError):
  """A flag or an --output_json at fault; one line, exit 2."""


def number_list(kind):
  """argparse type: "4,8" -> [4, 8] (kind int or float); a bad item names itself."""
  def parse(text: str):
    try:
      values = [kind(item) for item in text.split(",") if item.strip()]
    except ValueError as e:
      raise argparse.ArgumentTypeError(f"{text!r}: {e}")
    if not values:
      raise argparse.ArgumentTypeError("empty list")
    return values
  return parse


def point_name(beam_size: int, alpha: float, extra_length: Optional[int] = None) -> str:
  """b4.a0.6, or b4.a0.6.x20 for a point of an --extra_lengths grid."""
  name = f"b{beam_size}.a{alpha:g}"
  return name if extra_length is None else f"{name}.x{extra_length}"


def best(points: Sequence[Dict], metric: str) -> Dict:
  """The point with the highest `metric`; among equals, the one listed first."""
  if not points:
    raise ChoiceError("no grid point was scored")
  return max(points, key=lambda p: (p["metrics"][metric], -p["order"]))


def alpha_step(alphas: Sequence[float]) -> float:
  """The grid's step at its upper edge: the last two alphas apart (0.2 for one alpha)."""
  top = sorted(set(alphas))
  return round(top[-1] - top[-2], 6) if len(top) > 1 else 0.2


def extend_at_edge(points: List[Dict], metric: str, score, step: float, limit: int) -> Dict:
  """The best point after trying up to `limit` alphas past the edge, one `step` each.

  `points` holds the scored grid and receives each new point; `score(beam_size,
  alpha, extra_length)` scores one. A new alpha is tried only while the best
  point's alpha is the largest tried for its beam size and extra length (None
  where the grid has none), so a peak inside the grid costs nothing.
  """
  chosen = best(points, metric)
  for _ in range(limit):
    beam, extra_length = chosen["beam_size"], chosen.get("extra_length")
    edge = max(p["alpha"] for p in points
               if p["beam_size"] == beam and p.get("extra_length") == extra_length)
    if chosen["alpha"] != edge:
      break
    points.append(score(beam, round(edge + step, 6), extra_length))
    chosen = best(points, metric)
  return chosen


def length_ratio(hypotheses: Sequence[str], references: Sequence[str]) -> float:
  """Whitespace tokens of the decodes over those of the references: under 1 is too short."""
  return sum(len(h.split()) for h in hypotheses) / max(sum(len(r.split()) for r in references), 1)


def load_done(path: str, key: Dict) -> Dict[str, Dict]:
  """The points already scored in `path` for this `key`; refuses another run's file."""
  if not os.path.exists(path):
    return {}
  try:
    with open(path, encoding="utf-8") as f:
      saved = json.load(f)
  except ValueError as e:
    raise ChoiceError(f"--output_json={path} is not JSON ({e}); move it away or choose another")
  if saved.get("key") != key:
    raise ChoiceError(f"--output_json={path} was written for {saved.get('key')}, not {key}; "
                      "choose another --output_json")
  return {p["name"]: p for p in saved.get("points", [])}


def write(path: str, key: Dict, metric: str, points: List[Dict], chosen: Optional[Dict]):
  report = {"key": key, "metric": metric, "points": points,
            "chosen": chosen and chosen["name"],
            "decode_hparams": chosen and chosen["decode_hparams"]}
  with files.atomic_write(path) as f:
    json.dump(report, f, indent=1)
    f.write("\n")


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--problem", required=True)
  parser.add_argument("--data_dir", default=None, help="The datagen output (problems with files).")
  parser.add_argument("--output_dir", required=True,
                      help="The training run; several, comma-separated: one ensemble.")
  parser.add_argument("--checkpoint_path", default=None,
                      help="Default: the run's latest (with several runs: one per run).")
  parser.add_argument("--split", default="dev", help="Never test.")
  parser.add_argument("--beam_sizes", type=number_list(int), default=[4])
  parser.add_argument("--alphas", type=number_list(float), default=[0.6])
  parser.add_argument("--decode_hparams", default="",
                      help="Fixed for every point, e.g. extra_length=50.")
  parser.add_argument("--extra_lengths", type=number_list(int), default=None,
                      help="Each point also at each longest output, source length + N "
                           "(e.g. 50,20,10; the first wins a tie). Default: "
                           "--decode_hparams's extra_length alone.")
  parser.add_argument("--hparams", default="",
                      help="Overrides of the run's hparams for decoding, as t2t-decoder's "
                           "(e.g. dtype=float32: a bfloat16-trained model decoded in float32).")
  parser.add_argument("--lines", type=int, default=0, help="Only the first N lines (0: all).")
  parser.add_argument("--extend_alphas", type=int, default=0,
                      help="While the best alpha is the largest tried, try the next one up "
                           "(one grid step further), at most N more (0: the grid only).")
  parser.add_argument("--output_json", required=True)
  args = parser.parse_args(argv)
  if args.split == "test":
    raise ChoiceError("--split=test: decoding settings are chosen on dev, never on test")
  if any(b < 1 for b in args.beam_sizes):
    raise ChoiceError(f"--beam_sizes={args.beam_sizes}: each must be at least 1")
  if args.extend_alphas < 0:
    raise ChoiceError(f"--extend_alphas={args.extend_alphas}: must be 0 or more")

  from t2tlite.decoding.decode_hparams import DecodeHParams
  from t2tlite.decoding.loading import load_pipeline
  from t2tlite.decoding.pipeline import DecodePipeline
  from t2tlite.progress import Progress

  registry.load_all()
  problem = registry.problem(args.problem)
  DecodeHParams().override(args.decode_hparams)  # A bad fixed setting fails before loading.
  if args.extra_lengths:
    fixed_keys = {item.split("=", 1)[0].strip() for item in args.decode_hparams.split(",")}
    if "extra_length" in fixed_keys:
      raise ChoiceError(f"--extra_lengths={args.extra_lengths} and --decode_hparams="
                        f"{args.decode_hparams} both set extra_length: give one")
    if any(n < 0 for n in args.extra_lengths):
      raise ChoiceError(f"--extra_lengths={args.extra_lengths}: each must be 0 or more")
  sources, references = problem.eval_text(args.split, args.data_dir)
  if args.lines:
    sources, references = sources[:args.lines], references[:args.lines]
  base, checkpoint = load_pipeline(args.output_dir, problem, args.data_dir, args.decode_hparams,
                                   args.checkpoint_path, hparams_overrides=args.hparams)
  metric = problem.eval_metrics[0]
  key = {"problem": problem.name, "checkpoint": checkpoint, "split": args.split,
         "lines": len(sources), "decode_hparams": args.decode_hparams}
  if args.hparams:  # Only when given, so files written before the flag still resume.
    key["hparams"] = args.hparams
  done = load_done(args.output_json, key)
  stem = os.path.splitext(args.output_json)[0]
  points = []
  pending = {}  # Points decoded by their line's one search, not yet reached in the grid's order.
  spare = {}  # name -> (point, decodes): alphas past the edge, searched with their line.
  step = alpha_step(args.alphas)
  past_edge = []  # The alphas --extend_alphas may try, as extend_at_edge steps to them.
  for _ in range(args.extend_alphas):
    past_edge.append(round((past_edge or [max(args.alphas)])[-1] + step, 6))

  def setting_of(beam_size: int, alpha: float, extra_length: Optional[int]) -> str:
    longest = "" if extra_length is None else f"extra_length={extra_length}"
    return ",".join(s for s in (args.decode_hparams, longest, f"beam_size={beam_size}",
                                f"alpha={alpha:g}") if s)

  def save_decodes(name: str, decodes: List[str]) -> None:
    with files.atomic_write(f"{stem}.{name}.txt") as f:
      f.writelines(line + "\n" for line in decodes)

  def decode_line(beam_size: int, alphas: List[float], extra_length: Optional[int],
                  spares: Sequence[float] = ()) -> None:
    """`alphas` of one (beam size, extra length) line, and `spares`, from one search.

    Each alpha's decode is the one a search with it alone gives (search.py, "Several
    alphas in one search"); `seconds` is the shared search's. The line's points go to
    `pending`, the spares' to `spare`, saved only if the edge's extension reaches them.
    """
    hp = DecodeHParams().override(problem.default_decode_hparams).override(
        setting_of(beam_size, alphas[0], extra_length))
    pipeline = DecodePipeline(problem, base.decoder.model, hp, encoders=base.encoders)
    searched = list(alphas) + [a for a in spares if a not in alphas]
    names = [point_name(beam_size, alpha, extra_length) for alpha in searched]
    label = names[0] if len(names) == 1 else f"{names[0]}..a{searched[-1]:g}"
    reporter = Progress(f"{args.split} {label}", len(sources), "lines")
    decodes = pipeline.decode_per_alpha(sources, searched, references, reporter.update)
    reporter.finish(len(sources))
    for name, alpha, decoded in zip(names, searched, decodes):
      point = {"name": name, "beam_size": beam_size, "alpha": alpha,
               "decode_hparams": setting_of(beam_size, alpha, extra_length),
               "metrics": decoded.metrics, "length_ratio": length_ratio(decoded.best, references),
               "seconds": round(decoded.seconds, 1), "alphas_searched_together": len(searched)}
      if extra_length is not None:
        point["extra_length"] = extra_length
      if alpha in alphas:
        save_decodes(name, decoded.best)
        pending[name] = point
      else:
        spare[name] = (point, decoded.best)

  def score(beam_size: int, alpha: float, extra_length: Optional[int] = None) -> Dict:
    """One point, decoded and scored unless the json has it; saved at once.

    A grid point not yet decoded is decoded with every other missing alpha of its line
    in one search; a point past the grid's edge alone.
    """
    name = point_name(beam_size, alpha, extra_length)
    point = done.get(name) or pending.pop(name, None)
    if point is None and name in spare:
      point, decodes = spare.pop(name)
      save_decodes(name, decodes)
    if point is None:
      line = [a for a in args.alphas if point_name(beam_size, a, extra_length) not in done]
      if alpha in line:  # The grid's line, with the alphas its edge may be extended to.
        spares = [a for a in past_edge if point_name(beam_size, a, extra_length) not in done]
        decode_line(beam_size, line, extra_length, spares)
      else:
        decode_line(beam_size, [alpha], extra_length)
      point = pending.pop(name)
    point["order"] = len(points)
    print(f"{name}: {metric} {point['metrics'][metric]:.2f}, length ratio "
          f"{point['length_ratio']:.3f}", file=sys.stderr)
    write(args.output_json, key, metric, points + [point] + list(pending.values()), None)
    return point

  for extra_length, beam_size, alpha in itertools.product(args.extra_lengths or [None],
                                                         args.beam_sizes, args.alphas):
    points.append(score(beam_size, alpha, extra_length))
  chosen = extend_at_edge(points, metric, score, step, args.extend_alphas)
  write(args.output_json, key, metric, points, chosen)
  print(f"chose {chosen['name']} on {args.split} ({metric} {chosen['metrics'][metric]:.2f})",
        file=sys.stderr)
  print(chosen["decode_hparams"])
  return 0


def run() -> None:
  cli.run_script(main)


if __name__ == "__main__":
  run()
