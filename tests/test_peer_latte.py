"""The Latte authors' trainer as a peer of `lra bench --against-trainer` (lra.bench.peer_latte): the
map of our parameters onto their Classification's, the settings it builds, how a clone is
recognised, all without the clone; with one (LRA_REFERENCE_CLONES, folders joined by os.pathsep),
a few steps of our loop beside theirs.

The comparison on ListOps' `latte_code` and `paper` presets is committed as
results/against_trainer/latte_listops_*.json (docs/protocol.md).
"""
from __future__ import annotations

import os
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra import errors
from lra.bench import against_trainer, peer_latte
from lra.models.build import build_model
from lra.runs.config_loading import load_data, resolve_config
from lra.tasks.contract.spec import TaskSpec

CLONES = [Path(p) for p in os.environ.get("LRA_REFERENCE_CLONES", "").split(os.pathsep) if p]
CLONE = next((c for c in CLONES if (c / peer_latte.MARKER).is_file()), None)
SPEC = TaskSpec(vocab_size=16, seq_len=32, num_classes=10)
SMALL = ["model.num_layers=2", "model.dim=16", "model.mlp_dim=64", "model.num_heads=2",
         "mixers.latte.num_latents=6"]


def _flat(tree, prefix=""):
  out = {}
  for key, value in tree.items():
    name = f"{prefix}/{key}" if prefix else key
    out.update(_flat(value, name) if isinstance(value, dict) else {name: np.asarray(value)})
  return out


def _params(config):
  batch = {"inputs": jnp.ones((1, SPEC.seq_len), jnp.int32),
           "mask": jnp.ones((1, SPEC.seq_len), bool), "label": jnp.zeros((1,), jnp.int32)}
  model = build_model(config, SPEC)
  return jax.device_get(model.init(jax.random.PRNGKey(0), batch, deterministic=True)["params"])


def test_their_tree_holds_our_parameters_rearranged_only():
  """Their names as Flax gives them in models/tasks.py and common_layers.py (TransBlock: two
  LayerNorms, BidLatte, the MLP's two Dense layers; the head `_head`), their shapes (BidLatte's
  Wq, Wk [D, L], Wv, o_proj [D, D]), and back to ours exactly."""
  config = resolve_config("listops", "latte", "latte_code", SMALL)
  ours = _params(config)
  sizes = dict(num_layers=2, num_heads=2, num_latents=6)
  theirs = _flat(peer_latte.theirs_of_params(ours, **sizes))
  block = {"LayerNorm_0/scale": (16,), "LayerNorm_0/bias": (16,), "LayerNorm_1/scale": (16,),
           "LayerNorm_1/bias": (16,), "BidLatte_0/Wq": (16, 6), "BidLatte_0/Wk": (16, 6),
           "BidLatte_0/Wv": (16, 16), "BidLatte_0/o_proj": (16, 16),
           "Dense_0/kernel": (16, 64), "Dense_0/bias": (64,), "Dense_1/kernel": (64, 16),
           "Dense_1/bias": (16,)}
  expected = {"encoder/Embed_0/embedding": (16, 16), "_head/kernel": (16, 10),
              "_head/bias": (10,),
              **{f"encoder/TransBlock_{i}/{k}": v for i in range(2) for k, v in block.items()}}
  assert {k: v.shape for k, v in theirs.items()} == expected
  assert sum(v.size for v in theirs.values()) == sum(v.size for v in _flat(ours).values())
  back = _flat(peer_latte.ours_of_params(peer_latte.theirs_of_params(ours, **sizes), **sizes))
  flat = _flat(ours)
  assert back.keys() == flat.keys()
  for name, value in flat.items():
    np.testing.assert_array_equal(back[name], value, err_msg=name)


def test_the_map_splits_each_head_as_bid_latte_reads_it():
  """BidLatte reshapes Q, K [.., L] and V [.., D] to [.., H, -1]: head h owns columns
  h L/H .. (h+1) L/H - 1 of Wq, which must be our head h's query slice."""
  config = resolve_config("listops", "latte", "latte_code", SMALL)
  ours = _params(config)
  kernel = ours["encoder"]["block_0"]["mixer"]["qkv"]["kernel"]   # [D, H, 2 L/H + D/H]
  latte = peer_latte.theirs_of_params(ours, 2, 2, 6)["encoder"]["TransBlock_0"]["BidLatte_0"]
  for h in range(2):
    np.testing.assert_array_equal(latte["Wq"][:, 3 * h:3 * h + 3], kernel[:, h, :3])
    np.testing.assert_array_equal(latte["Wk"][:, 3 * h:3 * h + 3], kernel[:, h, 3:6])
    np.testing.assert_array_equal(latte["Wv"][:, 8 * h:8 * h + 8], kernel[:, h, 6:])


def test_their_classification_builds_the_listops_latte_presets_and_says_what_else_differs():
  for preset in ("latte_code", "paper"):
    config = resolve_config("listops", "latte", preset)
    assert peer_latte.unbuildable(config, SPEC) == [], preset
    assert peer_latte.optimizer_differences(config) == [], preset
    settings = peer_latte.their_settings(config, SPEC)
    # experiments/config/listops.yaml's values, from our config
    assert {k: settings[k] for k in ("lr", "batch_size", "hidden_dim", "nlayers", "nheads", "L",
                                      "pool", "prenorm", "batchnorm", "warmup_pc")} == dict(
        lr=1e-3, batch_size=64, hidden_dim=128, nlayers=6, nheads=4, L=40, pool="mean",
        prenorm=True, batchnorm=False, warmup_pc=0.0)
  lra = peer_latte.unbuildable(resolve_config("listops", "latte", "lra"), SPEC)
  assert any(s.startswith("model.final_norm=True") for s in lra)
  assert any(s.startswith("model.head='mlp'") for s in lra)
  assert any(s.startswith("model.mixer='softmax'") for s in peer_latte.unbuildable(
      resolve_config("listops", "softmax", "latte_code"), SPEC))
  # Text's paper preset decays by 0.05 where their trainer fixes 0.01 (latte_code has 0.01).
  assert peer_latte.optimizer_differences(resolve_config("text", "latte", "paper")) == [
      "train.weight_decay=0.05 (their jax_trainer.py: 0.01)"]
  assert peer_latte.optimizer_differences(resolve_config("text", "latte", "latte_code")) == []


def test_a_latte_clone_is_recognised_by_its_trainer(tmp_path):
  (tmp_path / peer_latte.MARKER).write_text("")
  assert against_trainer.peer_mixer(tmp_path) == "latte"
  with pytest.raises(errors.NotFound, match="models/tasks.py"):
    peer_latte.load(tmp_path)


@pytest.mark.skipif(CLONE is None, reason="set LRA_REFERENCE_CLONES to a clone of "
                    "raresdolga/latte_transformer")
def test_our_loop_and_their_trainer_agree_step_by_step(data_dir, tmp_path):
  config = resolve_config("listops", "latte", "smoke", ["model.mlp_dim=128"])
  data = load_data(config, data_dir, log=lambda _: None)
  peer = against_trainer.peer_for(CLONE, config, data.spec)
  rows = against_trainer.compare(config, data, peer, 3, tmp_path / "run")
  summary = against_trainer.summary(rows)
  assert summary["equal"] and summary["first_rate_difference_step"] is None, rows
  assert summary["max_loss_rel"] < 1e-5
