"""`lra pack RUN_DIR FILE.pack` and `lra unpack FILE.pack`: a run as one archive, and back."""
from __future__ import annotations

import argparse
from pathlib import Path

from lra.cli.common import local_results, add_command


def add_parser(commands) -> None:
  packer = add_command(commands, "pack", "write a run folder as one archive (split into 16 MiB "
                       "parts when larger) that `lra unpack` puts back elsewhere")
  packer.add_argument("run_dir", type=Path)
  packer.add_argument("archive", type=Path, metavar="FILE.pack")
  packer.set_defaults(handler=pack_main)
  unpacker = add_command(commands, "unpack", "put a packed run back at RESULTS_DIR/runs/TASK/"
                         "MIXER/NAME (checked); the same `lra run` then resumes it")
  unpacker.add_argument("archive", type=Path, metavar="FILE.pack",
                        help="the archive, or any of its parts FILE.pack.N")
  unpack_to = unpacker.add_mutually_exclusive_group()
  unpack_to.add_argument("--results-dir", type=Path, help="default results/local (where `lra run` "
                         "puts runs); `results` for the repository's committed runs")
  unpack_to.add_argument("--run-dir", type=Path, help="put the run in this folder instead: for a "
                         "run made with `lra run --run-dir` (a study's), resumed the same way")
  unpacker.set_defaults(handler=unpack_main)


def pack_main(args: argparse.Namespace, overrides: list[str]) -> int:
  from lra.runs.pack import pack, read_manifest
  written = pack(args.run_dir, args.archive)
  manifest = read_manifest(written[0])
  size = sum(p.stat().st_size for p in written)
  print(f"{args.run_dir} ({manifest['status']} at step {manifest['step']} of "
        f"{manifest['num_steps']}; checkpoint {manifest['checkpoint_step']}, best step "
        f"{manifest['best_step']}) -> {', '.join(map(str, written))} ({size / 2**20:.1f} MiB)")
  # A run made with `lra run --run-dir` elsewhere than runs/<task>/<mixer>/ goes back there.
  own_place = "/".join(Path(args.run_dir).resolve().parts[-4:]) == manifest["run"]
  where = "[--results-dir DIR]" if own_place else f"--run-dir {args.run_dir}"
  print(f"restore with: lra unpack {written[0]} {where}")
  return 0


def unpack_main(args: argparse.Namespace, overrides: list[str]) -> int:
  from lra.runs import run_identity
  from lra.runs.pack import resume_command, unpack
  results_dir = args.results_dir or local_results()
  target, manifest = unpack(args.archive, results_dir, args.run_dir)
  print(f"{target}: {manifest['status']} at step {manifest['step']} of {manifest['num_steps']} "
        f"(checkpoint {manifest['checkpoint_step']}, best step {manifest['best_step']})")
  if manifest["status"] != "complete":
    config = run_identity.read_config(target / "config.json")
    resume = resume_command(config, target)
    if resume is None:
      also = "" if args.run_dir else f" (or --results-dir {results_dir})"
      print(f"resume with its `lra run` command and --run-dir {target}{also}")
      return 0
    print(f"resume with: {resume}")
    if not config.get("data", {}).get("generate", False):
      print("  (and --data-dir DIR, unless its prepared data is in $LRA_DATA_DIR or ~/.cache/lra)")
  return 0
