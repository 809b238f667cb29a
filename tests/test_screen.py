"""The screen (lra check MIXER --screen): its verdicts, its ETA, its budget with SPT, where a mixer
stands among the committed records, the mistakes it refuses, and a tiny run end to end."""
import json
from pathlib import Path

import pytest

from lra.bench import fit_screen, screen
from lra.cli import main
from lra.runs.config_loading import resolve_config

ROOT = Path(__file__).resolve().parents[1]


def _score(part, value, status="complete"):
  return screen.Score(part, value, 0.0625 if part == "mix" else 0.5, 30.0, 20.0, 10.0, status,
                      "" if status == "complete" else "scratch at step 7: loss is nan")


def test_each_part_passes_at_its_bar_and_the_verdict_names_both():
  """mix passes at the synthetic run's own mark (95%), learn at the fitting screen's bar; a run
  that diverged fails its part at chance; the verdict is both parts in words."""
  mix, learn = _score("mix", 0.95), _score("learn", fit_screen.BAR)
  assert mix.passes and learn.passes and screen.verdict([mix, learn]) == "mixes and learns"
  one_end = _score("mix", 0.25)
  assert not one_end.passes
  assert screen.verdict([one_end, learn]) == "does not mix, learns"
  assert screen.verdict([mix, _score("learn", 0.6)]) == "mixes, does not learn"
  assert screen.line(one_end).startswith("FAIL  mix   does not mix: 25.0% test accuracy")
  assert "(needs >= 95%; one end alone gives 25%, chance 6.25%)" in screen.line(one_end)
  assert screen.line(learn, spt=True).startswith("PASS  learn learns with SPT: 65.0% train")
  assert "4x4 squares, 240 pretrain + 360 spt steps (needs >= 65%" in screen.line(learn, spt=True)
  nan = _score("mix", 0.0625, "diverged")
  assert not nan.passes
  assert screen.line(nan).startswith("FAIL  mix   does not mix: its scratch at step 7: loss is nan")


def test_with_spt_each_part_pretrains_for_the_shared_share_of_its_steps():
  """Pretraining and fine-tuning together take the part's steps (SPT_SHARE of them pretrain, the
  protocol's compute-matched split); each phase's config trains exactly its share."""
  from lra.configs.common import SPT_SHARE
  for part in screen.PARTS:
    (name, steps, settings), = part.phases(False)
    assert name == "scratch" and steps == part.steps and f"train.num_steps={steps}" in settings
    pretrain, tune = part.phases(True)
    assert pretrain[1] == round(SPT_SHARE * part.steps) and pretrain[1] + tune[1] == part.steps
    assert "objective=denoise" in pretrain[2]
    config = resolve_config(part.task, "latte", part.preset, pretrain[2])
    assert config.train.num_steps == pretrain[1] and config.objective == "denoise"
    assert config.train.warmup_steps == round(SPT_SHARE * int(part.setting("train.warmup_steps")))
    config = resolve_config(part.task, "latte", part.preset, [*tune[2], "spt.init_from=somewhere"])
    assert config.train.num_steps == tune[1]
  mix = resolve_config("synthetic", "latte", "paper", screen.MIX.settings)
  assert mix.data.generator.seq_len == screen.SEQ_LEN and mix.model.pooling == "cls"


def test_the_eta_adds_each_runs_compile_steps_and_evaluations():
  timed = [screen.Timed("mix scratch", 400, 2000, 32, 5.0, 0.05),
           screen.Timed("learn scratch", 600, 120, 32, 4.0, 0.02)]
  assert timed[0].seconds == pytest.approx(
      screen.RUN_START_S + 5.0 + 400 * 0.05 + screen.EVAL_SHARE * 2000 * 0.05 / 32)
  total = sum(t.seconds for t in timed)
  line = screen.eta_line(timed)
  assert line.startswith(f"ETA {total:.0f} s on this machine now")
  assert "mix scratch 400 x 50 ms, learn scratch 600 x 20 ms; compiling 9 s" in line
  assert screen.eta_s({"timed": [vars(t) for t in timed]}) == pytest.approx(total)


def _records():
  rows = []
  for mixer, (mix, learn) in {"softmax": (1.0, 1.0), "latte": (1.0, 0.77), "mega": (0.6, 0.6),
                              "linear": (1.0, 0.5)}.items():
    for seed in (0, 1):
      flip = mixer == "mega" and seed == 1  # mega's second seed fits
      scores = [_score("mix", mix), _score("learn", 0.7 if flip else learn)]
      rows.append(screen.record(mixer, seed, False, scores, []))
  return rows


def test_where_a_mixer_stands_among_the_records():
  records = _records()
  text = screen.standing(0.75, "learn", records)
  # softmax 100%, latte 77%, mega 65% (its two seeds' mean), linear 50%
  assert text.startswith("2 of the 4 built-in mixers score higher, over their 2 seeds")
  assert "(next above: latte 77.0%; next below: mega 65.0%)" in text
  assert text.endswith("2 of them pass on every seed, 1 on some")
  assert screen.standing(1.0, "mix", records).startswith("0 of the 4")
  assert screen.standing(0.5, "mix", [], False).startswith("no committed screen records")
  assert screen.standing(0.5, "mix", records, spt=True).startswith("no committed")
  assert "took 1.0 min to 1.0 min on one core" in screen.time_standing(60.0, records, False)


def test_reversals_count_the_mixers_whose_second_seed_changes_the_verdict():
  rev = screen.reversals(_records())
  assert rev["learn"] == (1, 4, ["mega"]) and rev["mix"] == (0, 4, [])
  assert rev["verdict"] == (1, 4, ["mega"])
  assert "the verdict reversed for 1 of 4 mixers (mega)" in screen.markdown(_records())


def test_the_committed_readme_is_made_from_the_records():
  """results/screen/README.md types no figure: `python -m lra.bench.screen` writes it from
  screen.json, and every built-in mixer has both seeds from scratch there."""
  from lra.models.mixers import MIXERS
  folder = ROOT / "results" / "screen"
  records = json.loads((folder / "screen.json").read_text())
  assert (folder / "README.md").read_text() == screen.markdown(records)
  assert records == screen.load_records()  # what `lra check --screen` compares with
  scratch = {(r["mixer"], r["seed"]) for r in records if not r["spt"]}
  assert scratch == {(m, s) for m in MIXERS for s in (0, 1)}


@pytest.mark.parametrize("argv, says", [
    (["--fit", "--screen"], "the screen's learn part is the fitting screen; drop --fit: "
                            "lra check latte --screen"),
    (["--spt"], "--spt goes with --screen: lra check latte --screen --spt"),
    (["--seed", "1"], "--seed 1 goes with --screen: lra check latte --screen --seed 1"),
    (["--screen", "--seed", "-1"], "--seed -1: a seed is 0 or more"),
])
def test_options_that_do_not_go_together_end_in_one_line(argv, says, capsys):
  assert main(["check", "latte", *argv]) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and says in err[0]


SMALL = ("train.num_steps=4", "train.warmup_steps=0", "train.log_every_steps=2",
         "eval.every_steps=4", "checkpoint.every_steps=4")
TINY = (screen.Part("mix", "synthetic", "smoke", SMALL, screen.MIX.bar, screen.MIX.measure),
        screen.Part("learn", "pathfinder", "squares", (
            *SMALL, "data.generator.num_images=60", "model.num_layers=1", "model.dim=16",
            "model.mlp_dim=32", "model.num_heads=2", "train.batch_size=8", "eval.batch_size=8"),
            screen.LEARN.bar, screen.LEARN.measure))


@pytest.fixture
def tiny(tmp_path, monkeypatch):
  """The screen's parts at smoke sizes, its data in tmp_path."""
  monkeypatch.setattr(screen, "MIX", TINY[0])
  monkeypatch.setattr(screen, "LEARN", TINY[1])
  monkeypatch.setattr(screen, "PARTS", TINY)
  monkeypatch.setenv("LRA_DATA_DIR", str(tmp_path))


def _lines_of_a_screen(out: str) -> tuple[list[str], int]:
  lines = out.splitlines()
  eta = next(i for i, line in enumerate(lines) if line.startswith("screen: ETA "))
  first = next(i for i, line in enumerate(lines) if line.startswith(("PASS  mix", "FAIL  mix")))
  assert eta < first  # the ETA comes before any run
  assert lines[-1].startswith("lra check: latte meets the mixer contract; the screen: ")
  return lines, eta


def test_a_tiny_screen_runs_end_to_end_with_its_eta_and_comparison(tiny, capsys):
  """`lra check MIXER --screen` at smoke sizes: the ETA before the runs, a line per part, where
  each stands among the committed records, and the verdict (exit 0 only if both pass)."""
  from lra.models.mixers import MIXERS
  code = main(["check", "latte", "--screen"])
  out = capsys.readouterr().out
  lines, eta = _lines_of_a_screen(out)
  assert "mix scratch 4 x" in lines[eta] and "learn scratch 4 x" in lines[eta]
  assert [line.split()[1] for line in lines if line.startswith(("PASS", "FAIL"))][-2:] == [
      "mix", "learn"]
  assert "  mix beside the built-in mixers: " in out and f" of the {len(MIXERS)} built-in" in out
  assert "  time: " in out and "SPT" not in out
  assert code == (0 if lines[-1].split("the screen: ")[1].startswith("mixes and learns") else 1)


@pytest.mark.slow
def test_a_tiny_screen_with_spt_sets_each_part_against_scratch(tiny, capsys):
  """`--spt`: the ETA times the pretrainings too; each part from scratch, then pretrained and
  fine-tuned, then each against the other."""
  main(["check", "latte", "--screen", "--spt"])
  lines, eta = _lines_of_a_screen(capsys.readouterr().out)
  assert "learn pretrain 2 x" in lines[eta] and "learn spt 2 x" in lines[eta]
  parts = [line.split()[1:3] for line in lines if line.startswith(("PASS", "FAIL"))][-4:]
  assert [p[0] for p in parts] == ["mix", "learn", "mix", "learn"]
  assert sum("with SPT:" in line for line in lines if line.startswith(("PASS", "FAIL"))) == 2
  assert any(line.startswith("  SPT against scratch, learn: ") for line in lines)
  assert "(with SPT: " in lines[-1]
