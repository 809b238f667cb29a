"""A run resumes only on the data it was trained on: two ledger loans once resumed a ListOps row
on freshly generated, differently seeded files, and nothing noticed."""
import json

from lra.cli import main as lra_main

SMALL = ["--num-train", "256", "--num-val", "64", "--num-test", "64", "--min-length", "8",
         "--max-length", "80", "--max-depth", "4", "--max-args", "5"]
RUN = ["run", "listops", "latte", "--preset", "paper", "--quiet",
       *(f"--config.{o}" for o in ("model.num_layers=1", "model.dim=32", "model.mlp_dim=64",
                                   "train.batch_size=16", "train.num_steps=60",
                                   "eval.every_steps=20", "eval.batch_size=32",
                                   "checkpoint.every_steps=20"))]


def _data(tmp_path, seed):
  raw, data = tmp_path / f"raw{seed}", tmp_path / f"data{seed}"
  assert lra_main(["data", "generate", "listops", "--out", str(raw), "--seed", str(seed),
                   *SMALL]) == 0
  assert lra_main(["data", "prepare", "listops", "--source", str(raw), "--data-dir",
                   str(data)]) == 0
  return data


def test_a_run_refuses_to_resume_on_other_data(tmp_path, step_clock, monkeypatch, capsys):
  ours, other = _data(tmp_path, 1), _data(tmp_path, 2)
  run_dir = tmp_path / "run"
  step_clock()
  assert lra_main([*RUN, "--data-dir", str(ours), "--run-dir", str(run_dir),
                   "--stop-after", "55"]) == 130
  monkeypatch.undo()
  stopped = (run_dir / "final.json").read_text()
  assert json.loads(stopped)["data"]["arrays_sha256"].startswith("sha256:")
  capsys.readouterr()

  assert lra_main([*RUN, "--data-dir", str(other), "--run-dir", str(run_dir)]) == 2
  err = capsys.readouterr().err.strip()
  assert "on other data than" in err and "prepared arrays" in err
  assert "basic_train.tsv" in err and len(err.splitlines()) == 1
  assert (run_dir / "final.json").read_text() == stopped  # nothing trained or written

  assert lra_main([*RUN, "--data-dir", str(ours), "--run-dir", str(run_dir)]) == 0
  assert json.loads((run_dir / "final.json").read_text())["status"] == "complete"


def test_what_counts_as_other_data():
  from lra.runs.run_identity import data_changes
  record = {"arrays_sha256": "sha256:" + "a" * 64, "splits": {"train": 8, "val": 2},
            "options": {"difficulty": "easy"},
            "source": {"path": "/elsewhere", "checksums": {
                "metadata/0.npy": "sha256:" + "b" * 64,
                "imgs (listed in metadata)": "size+mtime:8:" + "c" * 64}}}
  # The same images made again elsewhere: another path, another listing time; an option added to
  # meta.json since, and an older record without the arrays' hash.
  again = {**record, "source": {"path": "/here", "checksums": {
      "metadata/0.npy": "sha256:" + "b" * 64, "imgs (listed in metadata)": "size+mtime:8:d"}},
           "options": {"difficulty": "easy", "split_seed": 0}}
  assert data_changes(record, again) == []
  assert data_changes({k: v for k, v in record.items() if k != "arrays_sha256"}, again) == []
  other = {**again, "arrays_sha256": "sha256:" + "e" * 64, "options": {"difficulty": "hard"}}
  assert data_changes(record, other) == ["prepared arrays aaaaaaaaaaaa..., now eeeeeeeeeeee...",
                                         "options.difficulty easy, now hard"]
