"""`lra bench --against`: the maps of our weights onto the references', checked against naive
formulas written from the references' descriptions (no clone needed), the check that catches a
broken map, and the command on tiny cases; with the clones (LRA_REFERENCE_CLONES, folders joined
by os.pathsep) the authors' own layers too."""
import dataclasses
import json
import os
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra.bench import against, reference_layers as refs
from lra.cli import main
from lra.models.mixers import latte, s5

ROOT = Path(__file__).resolve().parents[1]
CLONES = [Path(p) for p in os.environ.get("LRA_REFERENCE_CLONES", "").split(os.pathsep) if p]


def _x_and_mask(b=2, t=12, d=8):
  x = jax.random.normal(jax.random.PRNGKey(3), (b, t, d))
  mask = np.arange(t)[None] < np.asarray([[t], [t - 5]])[:b]
  return x, jnp.asarray(mask)


def _softmax(z, axis):
  z = np.exp(z - z.max(axis, keepdims=True))
  return z / z.sum(axis, keepdims=True)


def test_latte_map_gives_the_naive_bid_latte_formula():
  """BidLatte as its authors describe it: separate Wq, Wk [D,L], Wv, o_proj [D,D], split per head
  head-major; p(l|t) a softmax over the head's latents, p(s|l) a softmax over real times.

  A formula written from the description, not the authors' layer: this and the S5 test below
  check the maps without a clone. Only test_the_authors_layers_compute_ours (clones needed) and
  the `check` of each `lra bench --against` record compare with the third-party code."""
  heads, latents, d = 2, 6, 8
  x, mask = _x_and_mask(d=d)
  layer = latte.LatteMixer(dim=d, num_heads=heads, max_len=12, num_latents=latents)
  params = layer.init(jax.random.PRNGKey(0), x, mask, deterministic=True)["params"]
  w = {k: np.asarray(v, np.float64) for k, v in
       refs.latte_to_bid_latte(params, heads, latents).items()}
  xs, real = np.asarray(x, np.float64), np.asarray(mask)
  per, dh = latents // heads, d // heads
  per_head = []
  for h in range(heads):
    q = _softmax(xs @ w["Wq"][:, h * per:(h + 1) * per], -1)                # [B,T,L/H]
    k = np.where(real[..., None], xs @ w["Wk"][:, h * per:(h + 1) * per], -np.inf)
    p_s = _softmax(k, 1)                                                     # over time
    v = xs @ w["Wv"][:, h * dh:(h + 1) * dh]
    per_head.append(np.einsum("btl,bsl,bsd->btd", q, p_s, v))
  expected = np.concatenate(per_head, -1) @ w["o_proj"]
  ours = layer.apply({"params": params}, x, mask, deterministic=True)[0]
  np.testing.assert_allclose(ours, expected, atol=1e-5)


def test_s5_map_gives_the_naive_bidirectional_recurrence():
  """S5SSM's parameters (log_step [P,1]; C1, C2 [H,P,2]) run as the plain recurrences, one step at
  a time: x_t = Lambda_bar x_{t-1} + B_bar u_t forwards, the same backwards, y = 2 Re(C [x; x'])
  + D u."""
  d, t = 4, 10
  x = jax.random.normal(jax.random.PRNGKey(3), (1, t, d))
  layer = s5.S5Mixer(dim=d, num_heads=1, max_len=t, state_size=8, blocks=2)
  mask = jnp.ones((1, t), bool)
  params = layer.init(jax.random.PRNGKey(0), x, mask, deterministic=True)["params"]
  p = {k: np.asarray(v, np.float64) for k, v in refs.s5_to_s5ssm(params).items()}
  lam = p["Lambda_re"] + 1j * p["Lambda_im"]
  lam_bar = np.exp(lam * np.exp(p["log_step"][:, 0]))
  b_bar = ((lam_bar - 1) / lam)[:, None] * (p["B"][..., 0] + 1j * p["B"][..., 1])   # [P,H]
  c = np.concatenate([p[k][..., 0] + 1j * p[k][..., 1] for k in ("C1", "C2")], -1)  # [H,2P]
  u = np.asarray(x[0], np.float64)
  fwd, bwd = np.zeros((t, lam.size), complex), np.zeros((t, lam.size), complex)
  state = np.zeros(lam.size, complex)
  for i in range(t):
    fwd[i] = state = lam_bar * state + b_bar @ u[i]
  state = np.zeros(lam.size, complex)
  for i in reversed(range(t)):
    bwd[i] = state = lam_bar * state + b_bar @ u[i]
  expected = 2 * (np.concatenate([fwd, bwd], -1) @ c.T).real + p["D"] * u
  ours = layer.apply({"params": params}, x, mask, deterministic=True)[0][0]
  np.testing.assert_allclose(ours, expected, atol=1e-4)


@pytest.mark.parametrize("name", ["softmax_flax_listops", "softmax_jax_listops"])
def test_softmax_against_flax_and_jax_is_checked_then_timed(name):
  record = against.run_case(against.shrink(against.CASES[name]), [], batch=2, rounds=2, per_round=1)
  check = record["check"]
  assert record["status"] == "ok" and check["same_function"] and check["layout_matches"]
  assert check["output_max_abs_diff"] < 1e-5 < check["output_max_abs"]
  # The record says what the check compared, so a reader of it knows what "ok" means.
  assert check["compared"] == against.CHECKED and check["tolerance"] == against.TOLERANCE
  assert check["inputs"] == [2, 16, 8] and check["matmul_precision"] == "highest"
  for side in ("ours", "theirs"):
    assert len(record[side]["round_ms"]) == 2 and record[side]["peak_bytes"] > 0
  assert record["speedup_round_min"] <= record["speedup_round_max"]


def test_a_broken_map_is_caught_and_not_timed(monkeypatch):
  """Queries and keys swapped: the same shapes, another function."""
  def swapped(params):
    mapped = refs.softmax_to_flax(params)
    return {**mapped, "query": mapped["key"], "key": mapped["query"]}
  real = refs.softmax_pair
  monkeypatch.setattr(refs, "softmax_pair", lambda *a: dataclasses.replace(
      real(*a), to_theirs=swapped))
  record = against.run_case(against.shrink(against.CASES["softmax_flax_listops"]), [], batch=2)
  assert record["check"]["layout_matches"] and not record["check"]["same_function"]
  assert record["status"] == "differs: not timed" and "ours" not in record


@pytest.mark.skipif(not (refs.find_clone("latte", CLONES) and refs.find_clone("s5", CLONES)),
                    reason="set LRA_REFERENCE_CLONES to clones of raresdolga/latte_transformer "
                    "and lindermanlab/S5")
@pytest.mark.parametrize("name", ["latte_listops", "s5_listops"])
def test_the_authors_layers_compute_ours(name):
  """The third-party layers themselves (skipped without LRA_REFERENCE_CLONES: CI has no clones,
  so there the maps are checked against formulas only, above). Each `lra bench --against` record
  keeps this check, with what it compared and the clone's commit."""
  case = against.shrink(against.CASES[name])
  pair = against.make_pair(case, CLONES)
  found = against.check(pair, *against.inputs(2, 16, 8, pair.masked))
  assert found["same_function"] and found["layout_matches"], found


def test_cli_writes_the_record_and_the_page_block(tmp_path, monkeypatch, capsys):
  monkeypatch.setattr(against, "CASES", {n: against.shrink(c) for n, c in against.CASES.items()})
  page = tmp_path / "docs" / "performance.md"
  page.parent.mkdir()
  page.write_text(f"intro\n{against.DOC_MARKERS[0]}\nstale\n{against.DOC_MARKERS[1]}\nend\n")
  out = tmp_path / "results" / "against.json"
  assert main(["bench", "--against", "--cases", "softmax_flax,latte", "--batch", "2",
               "--rounds", "1", "--steps", "1", "--json", str(out), "--readme", str(page)]) == 0
  report = json.loads(out.read_text())
  statuses = {r["case"]: r["status"] for r in report["records"]}
  assert statuses["softmax_flax_listops"] == "ok"
  assert statuses["latte_listops"].startswith("not run: no clone of")
  text = page.read_text()
  assert text.startswith("intro\n") and text.endswith("\nend\n") and "stale" not in text
  assert against.doc_block(report, "../results/against.json") in text
  assert "| softmax_flax_listops |" in capsys.readouterr().out
  # A folder that is no known clone, and a case that does not exist: one line each, exit 2.
  assert main(["bench", "--against", str(tmp_path)]) == 2
  assert main(["bench", "--against", "--cases", "nope"]) == 2
  assert main(["bench", "--against", "--lra-table"]) == 2
  err = capsys.readouterr().err
  assert "expected a clone of one of" in err and "--cases nope" in err


def test_the_committed_block_is_what_its_record_gives():
  """docs/performance.md's block equals what the committed record gives (or, before one is
  committed, says so)."""
  record = ROOT / "results" / "bench" / "against_cpu.json"
  text = (ROOT / "docs" / "performance.md").read_text()
  start, end = (text.index(m) for m in against.DOC_MARKERS)
  report = json.loads(record.read_text()) if record.exists() else None
  expected = against.doc_block(report, "../results/bench/against_cpu.json")
  assert text[start:end + len(against.DOC_MARKERS[1])] == expected
  if report:
    assert re.fullmatch(r"[0-9a-f]{40}(-dirty)?", report["git"])


def test_the_step_probe_carries_the_cases_to_the_next_accelerator(tmp_path, monkeypatch):
  import argparse
  import sys
  import time
  sys.path.insert(0, str(ROOT / "tools"))
  import step_probe  # noqa: PLC0415 - tools/ is no package
  monkeypatch.setattr(against, "CASES", {n: against.CASES[n] for n in ("softmax_flax_listops",
                                                                        "latte_listops")})
  args = argparse.Namespace(quick=True, against=[], argv=["--quick", "--against"], commit="abc")
  step_probe.probe_against(args, time.monotonic() + 600, tmp_path)
  report = json.loads((tmp_path / "against.json").read_text())
  assert [r["status"][:7] for r in report["records"]] == ["ok", "not run"]
  assert report["records"][0]["dims"]["seq_len"] == 16 and report["git"] == "abc"
  assert "| softmax_flax_listops |" in (tmp_path / "against.md").read_text()
