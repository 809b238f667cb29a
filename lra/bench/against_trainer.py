"""`lra bench --against-trainer CLONE`: our training loop beside a model's own trainer, step by
step.

Both start from our initial parameters (mapped onto the model's own names: entries re-arranged
only) and train on the batches `lra run`'s own loop draws, dropout off, each at the learning rates
its own code applies. After every step the loss, every parameter and BatchNorm's statistics are
compared: per tensor max |ours - theirs| / max |theirs|, the largest over tensors. The first step
where the parameters part by more than float rounding is where the two trainers differ: a rate, an
optimizer group, a block, the data path. A peer is a model's own code run from the user's clone
(lra.bench.peer_s5, lra.bench.peer_latte; never copied here), behind the small interface `Peer`
names.
"""
from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from lra import errors
from lra.bench.common import device_name, recorded_command, write_block, write_outputs
from lra.runs import writers
from lra.training import optim, train

# Float rounding over a few hundred steps (our loop against S5's, same rates: 3e-5 after 60 steps
# on the CPU): a parting above this is a difference of the trainers, not of summation order.
PARAM_TOLERANCE = 1e-3
LOSS_TOLERANCE = 1e-4
MARKERS = ("<!-- lra-against-trainer:start -->", "<!-- lra-against-trainer:end -->")


class Peer(Protocol):
  """A model's own trainer, driven on our batches."""
  name: str
  source: str

  def start(self, variables: Mapping[str, Any]) -> None:
    """Take our initial {"params", "batch_stats"} as its own state (fresh optimizer state)."""

  def step(self, batch: dict[str, np.ndarray], step: int) -> float:
    """One of its updates on our whole batch at its rates for `step` (0-based); its loss."""

  def rates(self, step: int) -> dict[str, float]:
    """The learning rates it applies at `step`, by our config's names."""

  def theirs_of(self, variables: Mapping[str, Any]) -> dict[str, Any]:
    """Our variables in its names and shapes."""

  def variables(self) -> dict[str, Any]:
    """Its current variables, in its names."""

  # Optional: `notes`, a list of what the comparison does not see (data order, evaluation, ...),
  # each with its source in the model's code; the record and its Markdown carry them. `inert`:
  # {tensor name in `variables()`: why} for parameters that reach no real output in either model
  # (a pad token's embedding): compared apart, outside the verdict.


class OwnStep:
  """Our model and optimizer stepped on each whole batch outside our loop: the same maths as our
  loop in another summation order (one batch, not micro-batches; another program). Compared with
  our loop (`--control`) it shows how far float rounding alone carries two runs apart over the
  same steps: the floor a peer's parting is read against."""

  name = "our own step"
  source = ("lra.bench.against_trainer.OwnStep: our model (models/build.py) and optimizer "
            "(lra/training/optim.py), one jitted step on the whole batch")

  def __init__(self, config: ml_collections.ConfigDict, spec):
    from lra.models.build import build_model
    config = ml_collections.ConfigDict(config.to_dict())
    config.model.dropout = 0.0
    self.model = build_model(config, spec)
    self.tx = optim.make_optimizer(config.train, optim.ssm_params(config))
    self.schedule = optim.learning_rate_schedule(config.train)
    self._update = jax.jit(self._step)

  def _step(self, variables, opt, batch):
    stats = {k: v for k, v in variables.items() if k != "params"}

    def loss_fn(params):
      # BatchNorm trains on the batch's statistics (deterministic=False; dropout is off).
      logits, new = self.model.apply({"params": params, **stats}, batch,
                                     deterministic=not stats, mutable=list(stats))
      loss = optax.softmax_cross_entropy_with_integer_labels(logits, batch["label"])
      return jnp.mean(loss), new
    (loss, new), grads = jax.value_and_grad(loss_fn, has_aux=True)(variables["params"])
    updates, opt = self.tx.update(grads, opt, variables["params"])
    return {"params": optax.apply_updates(variables["params"], updates), **new}, opt, loss

  def start(self, variables: Mapping[str, Any]) -> None:
    self.state = dict(variables)
    self.opt = self.tx.init(self.state["params"])

  def rates(self, step: int) -> dict[str, float]:
    return {"learning_rate": float(self.schedule(step))}

  def step(self, batch: dict[str, np.ndarray], step: int) -> float:
    self.state, self.opt, loss = self._update(self.state, self.opt, batch)
    return float(loss)

  def theirs_of(self, variables: Mapping[str, Any]) -> dict[str, Any]:
    return dict(variables)

  def variables(self) -> dict[str, Any]:
    return self.state


def _peers() -> dict[str, tuple[str, str, Any]]:
  """mixer -> (the file its clone is recognised by, the repository, the trainer class)."""
  from lra.bench import peer_latte, peer_s5
  return {"s5": (peer_s5.MARKER, "https://github.com/lindermanlab/S5", peer_s5.S5Trainer),
          "latte": (peer_latte.MARKER, "https://github.com/raresdolga/latte_transformer",
                    peer_latte.LatteTrainer)}


def peer_mixer(clone: Path) -> str:
  """The mixer whose own trainer the clone holds."""
  for mixer, (marker, _, _) in _peers().items():
    if (Path(clone) / marker).is_file():
      return mixer
  known = "; ".join(f"{url} (holds {marker})" for marker, url, _ in _peers().values())
  raise errors.NotFound(f"--against-trainer {clone}: expected a clone of {known}; clone it "
                        "(git clone URL) and pass its folder")


def peer_for(clone: Path, config: ml_collections.ConfigDict, spec) -> Peer:
  """The trainer the clone holds, built at `config`'s settings."""
  return _peers()[peer_mixer(clone)][2](Path(clone), config, spec)


def _flat(tree: Mapping[str, Any], prefix: str = "") -> dict[str, np.ndarray]:
  out = {}
  for key, value in tree.items():
    name = f"{prefix}/{key}" if prefix else str(key)
    out.update(_flat(value, name) if isinstance(value, Mapping) else {name: np.asarray(value)})
  return out


def differences(ours: Mapping[str, Any], theirs: Mapping[str, Any]) -> tuple[float, float, str]:
  """How far two trees of the same names are apart: the relative L2 distance of the whole tree,
  ||ours - theirs|| / ||theirs|| (the verdict), and the largest per-tensor relative difference,
  max |ours - theirs| / max |theirs|, with its tensor (where to look). A per-tensor figure alone
  overstates rounding: Adam moves an element whose gradient is ~0 by +-lr whichever sign float
  order gives it, which is a large share of a tiny tensor (a 2-class head's bias)."""
  a, b = _flat(ours), _flat(theirs)
  if set(a) != set(b):
    raise ValueError(f"the trees differ in names: {sorted(set(a) ^ set(b))[:6]}")
  worst, where, gap, size = 0.0, "", 0.0, 0.0
  for name in sorted(a):
    delta = a[name].astype(np.float64) - b[name].reshape(a[name].shape)
    gap, size = gap + float(np.sum(np.abs(delta) ** 2)), size + float(np.sum(np.abs(b[name]) ** 2))
    diff = float(np.max(np.abs(delta))) / (float(np.max(np.abs(b[name]))) or 1.0)
    if diff > worst:
      worst, where = diff, name
  return (gap / size) ** 0.5 if size else gap ** 0.5, worst, where


def _apart(tree: Mapping[str, Any], names: Mapping[str, str]
           ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
  """A tree's tensors by flat name: those not in `names`, and those in it."""
  flat = _flat(tree)
  return ({k: v for k, v in flat.items() if k not in names},
          {k: v for k, v in flat.items() if k in names})


def whole_batch(micro: Sequence[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
  """A step's micro-batches as the one batch they cut (rows padded to the longest: pads change no
  real output, the mixer contract)."""
  if len(micro) == 1:
    return dict(micro[0])
  longest = max(b[k].shape[1] for b in micro for k in b if k.startswith(("inputs", "mask")))
  def pad(a):
    return a if a.ndim < 2 else np.pad(a, [(0, 0), (0, longest - a.shape[1])])
  return {k: np.concatenate([pad(np.asarray(b[k])) for b in micro]) for k in micro[0]}


def compare(config: ml_collections.ConfigDict, data, peer: Peer, steps: int,
            run_dir: Path, log: Callable[[str], None] = lambda line: None
            ) -> list[dict[str, Any]]:
  """Our loop and `peer` for `steps` steps from our start on our batches; one row per step.
  `log` gets a line per step (the first step compiles both trainers: minutes for a large
  model on a CPU)."""
  config = ml_collections.ConfigDict(config.to_dict())
  config.model.dropout = 0.0  # masks are drawn differently by each: compare the maths
  s = train.setup(config, data.spec)
  start = train.model_variables(train.init_state(s, data.spec, config.train.seed))
  peer.start(jax.device_get(start))
  schedules = {"learning_rate": optim.learning_rate_schedule(config.train),
               "ssm_learning_rate": optim.learning_rate_schedule(
                   config.train, config.train.ssm_learning_rate or config.train.learning_rate)}
  rows: list[dict[str, Any]] = []
  log(f"against-trainer: our loop and {peer.name}'s trainer, {steps} steps each from the same "
      "start (the first step compiles both)")
  started = time.perf_counter()

  def on_step(step: int, micro, state, sums) -> bool:
    theirs_loss = peer.step(whole_batch(micro), step - 1)
    ours = jax.device_get(train.model_variables(state))
    mapped, now = peer.theirs_of(ours), peer.variables()
    inert = getattr(peer, "inert", {})
    (ours_live, ours_inert), (theirs_live, theirs_inert) = (
        _apart(mapped["params"], inert), _apart(jax.device_get(now["params"]), inert))
    params, tensor, where = differences(ours_live, theirs_live)
    stats = (differences(mapped["batch_stats"], jax.device_get(now["batch_stats"]))[1]
             if "batch_stats" in now else None)
    loss = float(sums["loss_sum"]) / max(float(sums["count"]), 1.0)
    theirs_rates = peer.rates(step - 1)
    rows.append({"step": step, "loss_ours": loss, "loss_theirs": theirs_loss,
                 "loss_rel": abs(loss - theirs_loss) / max(abs(theirs_loss), 1e-12),
                 "params_rel": params, "worst_tensor_rel": tensor, "worst_tensor": where,
                 "batch_stats_rel": stats,
                 "inert_rel": differences(ours_inert, theirs_inert)[0] if inert else None,
                 "rates_ours": {k: float(f(step - 1)) for k, f in schedules.items()
                                if k in theirs_rates},
                 "rates_theirs": theirs_rates})
    r = rows[-1]
    log(f"  step {step}/{steps}: loss ours {loss:.6f}, theirs {theirs_loss:.6f} (rel. "
        f"{r['loss_rel']:.1e}); params rel. {params:.1e}; {time.perf_counter() - started:.0f} s")
    return step >= steps

  config.eval.every_steps = config.checkpoint.every_steps = config.train.num_steps + 1
  train.train_and_evaluate(config, data, run_dir, progress=False, on_step=on_step)
  return rows


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
  parted = next((r["step"] for r in rows if r["params_rel"] > PARAM_TOLERANCE
                 or r["loss_rel"] > LOSS_TOLERANCE), None)
  rates = next((r["step"] for r in rows if any(
      not np.isclose(r["rates_ours"][k], v, rtol=1e-6, atol=0.0)
      for k, v in r["rates_theirs"].items())), None)
  inert = [r["inert_rel"] for r in rows if r.get("inert_rel") is not None]
  return {"steps": len(rows), "max_loss_rel": max(r["loss_rel"] for r in rows),
          "max_params_rel": max(r["params_rel"] for r in rows),
          "max_inert_rel": max(inert) if inert else None,
          "first_parting_step": parted, "first_rate_difference_step": rates,
          "equal": parted is None}


def _commit(clone: Path) -> str | None:
  try:
    return subprocess.run(["git", "-C", str(clone), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True, check=True).stdout.strip() or None
  except (OSError, subprocess.CalledProcessError):
    return None


def markdown(report: dict[str, Any]) -> str:
  s = report["summary"]
  control = report.get("control")
  by_step = {r["step"]: r for r in control["rows"]} if control else {}
  verdict = ("equal within float rounding" if s["equal"] else
             f"they part at step {s['first_parting_step']}")
  departs = report.get("departures") or []
  lines = [f"# Our loop against {report['peer']}'s own trainer: {report['task']}, preset "
           f"`{report['preset']}`" + (f" with {', '.join(departs)}" if departs else ""), "",
           f"`{report['command']}` on {report['device']}, {report['date']}; {report['peer']}: "
           f"{report['source']} (clone at {report['clone_commit'] or 'an unknown commit'})."
           + (f" {data_sentence(report['data'])}" if report.get("data") else ""), "",
           f"{s['steps']} steps from the same start on the same batches, dropout off: largest "
           f"relative difference of the loss {s['max_loss_rel']:.1e}, of the parameters "
           f"{s['max_params_rel']:.1e} ({verdict}; tolerances {LOSS_TOLERANCE:g} and "
           f"{PARAM_TOLERANCE:g})." + (
               f" The learning rates first differ at step {s['first_rate_difference_step']}."
               if s["first_rate_difference_step"] else " The learning rates agree at every step."),
           *([""] + [f"Compared apart, as they reach no real output in either model: `{name}`, "
                     f"{why}; largest relative difference {s['max_inert_rel']:.1e}."
                     for name, why in report["inert"].items()] if report.get("inert") else []),
           *([""] + [control_sentence(report["control"]["summary"])] if control else []),
           "", "Loss: |ours - theirs| / |theirs|; parameters: ||ours - theirs|| / ||theirs|| over "
           "every parameter, and the tensor with the largest max |ours - theirs| / max |theirs| "
           "(where to look first); BatchNorm's running statistics likewise.", "",
           "| step | loss, ours | loss, theirs | loss rel. diff. | params rel. diff. | "
           "largest tensor diff. | BatchNorm stats rel. diff. | rates, ours | rates, theirs |"
           + (" control: loss, params rel. diff. |" if control else ""),
           "|---:|---:|---:|---:|---:|---|---:|---|---|" + ("---:|" if control else "")]
  shown = {1, 2, 3, 5, 10, 20, 50} | set(range(100, s["steps"] + 1, 100)) | {s["steps"]}
  for r in report["rows"]:
    if r["step"] in shown or r["step"] == s["first_parting_step"]:
      stats = "" if r["batch_stats_rel"] is None else f"{r['batch_stats_rel']:.1e}"
      rate = lambda d: ", ".join(f"{v:.3g}" for v in d.values())  # noqa: E731
      own = by_step.get(r["step"])
      lines.append(f"| {r['step']} | {r['loss_ours']:.6f} | {r['loss_theirs']:.6f} | "
                   f"{r['loss_rel']:.1e} | {r['params_rel']:.1e} | {_worst(r)} | {stats} "
                   f"| {rate(r['rates_ours'])} | {rate(r['rates_theirs'])} |"
                   + (f" {own['loss_rel']:.1e}, {own['params_rel']:.1e} |" if own else
                      " |" if control else ""))
  if report.get("notes"):
    lines += ["", "What the comparison does not see, from reading their code:", ""]
    lines += [f"- {note}" for note in report["notes"]]
  return "\n".join(lines) + "\n"


def _worst(row: Mapping[str, Any]) -> str:
  """The tensor that differs most, with its difference (records from before it was measured
  name the tensor only)."""
  if "worst_tensor" in row:
    return f"{row['worst_tensor_rel']:.1e} ({row['worst_tensor']})"
  return row.get("worst_param", "")


def data_summary(meta: Mapping[str, Any]) -> dict[str, Any]:
  """What a record says of the data both trainers drew from (its folder is named DATA)."""
  from lra.runs import run_identity
  source = meta.get("source") if isinstance(meta.get("source"), Mapping) else {}
  return {"format": source.get("format"), "difficulty": meta.get("difficulty"),
          "splits": meta.get("splits"),
          "arrays_sha256": run_identity.arrays_fingerprint(meta.get("arrays"))}


def data_sentence(data: Mapping[str, Any]) -> str:
  splits = ", ".join(f"{k} {v:,}" for k, v in (data.get("splits") or {}).items())
  kind = ", ".join(str(x) for x in (data.get("format"), data.get("difficulty")) if x)
  return (f"Data: {kind or 'prepared arrays'} ({splits}; prepared arrays' fingerprint "
          f"{str(data.get('arrays_sha256'))[:19]}).")


def control_sentence(s: Mapping[str, Any]) -> str:
  """What the control (our loop against OwnStep) says, for a record's Markdown."""
  verdict = ("they stay equal within float rounding" if s["equal"] else
             f"they part at step {s['first_parting_step']}")
  return (f"Control (`--control`): our loop against our own model and optimizer stepped on each "
          f"whole batch, the same maths in another summation order: {verdict}; largest relative "
          f"difference of the loss {s['max_loss_rel']:.1e}, of the parameters "
          f"{s['max_params_rel']:.1e}. That is how far float rounding alone carries two runs "
          "apart over these steps.")


def block(reports: Sequence[dict[str, Any]], links: Sequence[str]) -> str:
  """docs/protocol.md's generated lines: one per committed record."""
  lines = [MARKERS[0], "<!-- Generated by `lra bench --against-trainer ... --readme "
           "docs/protocol.md`; do not edit between these markers. -->", "",
           "| trainer | task, preset | steps | loss rel. diff. | params rel. diff. | verdict | "
           "record |", "|---|---|---:|---:|---:|---|---|"]
  for report, link in zip(reports, links):
    s = report["summary"]
    verdict = ("equal" if s["equal"] else f"part at step {s['first_parting_step']}")
    own = (report.get("control") or {}).get("summary")
    if own:
      verdict += (f" (control: {'equal' if own['equal'] else 'part at step '}"
                  f"{'' if own['equal'] else own['first_parting_step']})")
    preset = "+".join([report["preset"], *([",".join(report["departures"])]
                                           if report.get("departures") else [])])
    lines.append(f"| {report['peer']} | {report['task']}, `{preset}` | {s['steps']} | "
                 f"{s['max_loss_rel']:.1e} | {s['max_params_rel']:.1e} | {verdict} | "
                 f"[{Path(link).stem}]({Path(link).with_suffix('.md').as_posix()}) |")
  return "\n".join([*lines, MARKERS[1]])


def main(args, overrides: list[str]) -> int:
  from lra.runs import run_identity
  from lra.runs.config_loading import (default_data_dir, load_data, reference_config,
                                       resolve_config)
  if not args.task:
    raise errors.BadValue("lra bench --against-trainer needs --task TASK (and --preset P): the "
                          "run whose training is compared")
  if args.readme and not args.json:
    raise errors.BadValue("lra bench --against-trainer --readme PAGE lists the records in the "
                          "folder of --json FILE: pass --json too")
  config = resolve_config(args.task, peer_mixer(args.against_trainer), args.preset, overrides)
  data = load_data(config, Path(args.data_dir or default_data_dir()))
  peer = peer_for(args.against_trainer, config, data.spec)
  with tempfile.TemporaryDirectory() as work:
    log = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    rows = compare(config, data, peer, args.trainer_steps, Path(work) / "run", log)
    control = (compare(config, data, OwnStep(config, data.spec), args.trainer_steps,
                       Path(work) / "control", log) if args.control else None)
  # The clone lies wherever its user put it: the record names it CLONE (its commit is kept).
  # The data folder likewise (DATA; the record describes the data it held).
  command = recorded_command().replace(writers.portable(str(args.against_trainer)), "CLONE")
  if args.data_dir:
    command = command.replace(writers.portable(str(args.data_dir)), "DATA")
  report = {"command": command, "peer": peer.name, "source": peer.source,
            "clone_commit": _commit(args.against_trainer), "task": config.task,
            "data": data_summary(data.meta),
            "preset": config.preset, "departures": run_identity.departures(
                config.to_dict(), reference_config(config.to_dict()).to_dict()),
            "device": device_name(jax.devices()[0]),
            "date": datetime.date.today().isoformat(), "jax": jax.__version__,
            "summary": summary(rows), "inert": dict(getattr(peer, "inert", {})),
            "notes": list(getattr(peer, "notes", [])),
            "control": None if control is None else {
                "peer": OwnStep.source, "summary": summary(control),
                "rows": [{k: r[k] for k in ("step", "loss_rel", "params_rel", "worst_tensor")}
                         for r in control]},
            "rows": rows}
  text = markdown(report)
  print(text)
  write_outputs(report, text, json_path=args.json, md_path=args.md)
  if args.readme:  # every record beside this one, one line each
    page, records = Path(args.readme), sorted(Path(args.json).parent.glob("*.json"))
    reports = [json.loads(p.read_text()) for p in records]
    links = [Path(os.path.relpath(p, page.parent)).as_posix() for p in records]
    write_block(page, None, None, MARKERS, lambda _report, _link: block(reports, links))
  return 0
