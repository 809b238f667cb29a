"""`lra pack RUN_DIR FILE.pack` and `lra unpack FILE [--results-dir DIR]`: a run as one archive.

A pack carries what resuming and re-scoring a run need, to another clone or machine: config.json,
final.json, metrics.jsonl, evals.jsonl, the newest checkpoint (full state: the same `lra run`
resumes from it; left out once the run is complete) and the best validation step's parameters
(lra.runs.best_params: `lra eval` reproduces the run's score from them). It is a tar whose first
member, `lra_pack.json`, names the run's place (`runs/<task>/<mixer>/<name>`) and every member's
size and sha256; unpacking checks each one and writes nothing until all are checked.

An archive over PART_BYTES (16 MiB, what a device call returns per file) is written as parts
FILE.pack.1, FILE.pack.2, ... of at most PART_BYTES each, which `unpack` joins (FILE.pack or any
part names the set). Packing over an older archive of the same name replaces all of its parts,
and only once the new archive is written in full (under temporary names beside it): an error
while writing leaves the older archive as it was.
"""
from __future__ import annotations

import contextlib
import datetime
import io
import json
import os
import re
import shlex
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lra import errors
from lra.runs import best_params, run_lock
from lra.runs.start import newest_step
from lra.base import manifest as digests  # `manifest` names the archive's here

PART_BYTES = 16 * 2**20
MANIFEST = "lra_pack.json"
FORMAT = 1
RUN_FILES = ("config.json", "final.json", "metrics.jsonl", "evals.jsonl")
_PART = re.compile(r"^(.*)\.(\d+)$")


class PackError(errors.BadValue):
  """An archive that cannot be written or read back as it was packed; one line with the fix."""


# ---------------------------------------------------------------------------------------------
# Packing.

def run_place(run_dir: Path, config: dict[str, Any]) -> str:
  """`runs/<task>/<mixer>/<name>`: where the run unpacks under a results folder. A folder already
  at such a place keeps its name; one from --run-dir elsewhere gets its default place."""
  run_dir = Path(run_dir).resolve()
  if len(run_dir.parts) > 4 and run_dir.parts[-4] == "runs" and run_dir.parts[-3] == config[
      "task"]:
    return "/".join(run_dir.parts[-4:])
  from lra.runs.config_loading import default_run_dir  # pylint: disable=import-outside-toplevel
  from lra.runs.start import as_recorded  # pylint: disable=import-outside-toplevel
  import ml_collections  # pylint: disable=import-outside-toplevel
  final_path = run_dir / "final.json"
  final = json.loads(final_path.read_text()) if final_path.is_file() else {}
  return default_run_dir(ml_collections.ConfigDict(as_recorded(config, final)),
                         Path(".")).as_posix()


def _members(run_dir: Path, final: dict[str, Any]) -> tuple[dict[str, Path | bytes], dict]:
  """{archive name: file or bytes} and what the manifest says about the checkpoints."""
  members: dict[str, Path | bytes] = {}
  for name in RUN_FILES:
    if (run_dir / name).is_file():
      members[name] = run_dir / name
  root = run_dir / "checkpoints"
  latest = newest_step(root)
  info: dict[str, Any] = {"checkpoint_step": None, "best_step": None}
  if final.get("status") != "complete":
    if latest is None:
      raise PackError(f"{run_dir} holds no checkpoint (it stopped before its first save, or "
                      "checkpoints/ was not copied): there is no state to carry; rerun it with "
                      "the same `lra run` command instead")
    for path in sorted((root / str(latest)).rglob("*")):
      if path.is_file():
        members[path.relative_to(run_dir).as_posix()] = path
    info["checkpoint_step"] = latest
  best = newest_step(root / "best")
  carried = best_params.carried(run_dir)
  if carried is not None and (best is None or carried[0] > best):
    members[carried[1].relative_to(run_dir).as_posix()] = carried[1]
    info["best_step"] = carried[0]
  elif best is not None:
    members[f"checkpoints/{best_params.FOLDER}/{best}.msgpack"] = best_params.from_orbax(
        root / "best" / str(best))
    info["best_step"] = best
  return members, info


def pack(run_dir: Path, archive: Path) -> list[Path]:
  """Writes `run_dir` as `archive` (or its parts); returns the files written.

  Raises:
    PackError: not a run folder, or an unfinished run without a checkpoint.
    RunDirLocked: a live `lra run` holds the folder.
  """
  run_dir, archive = Path(run_dir), Path(archive)
  for name in ("config.json", "final.json"):
    if not (run_dir / name).is_file():
      raise PackError(f"{run_dir} is not a run folder (no {name}); run folders are "
                      "RESULTS/runs/<task>/<mixer>/<run>/")
  with run_lock.RunDirLock(run_dir):  # no run may write it meanwhile
    config = json.loads((run_dir / "config.json").read_text())
    final = json.loads((run_dir / "final.json").read_text())
    members, info = _members(run_dir, final)
    manifest = {
        "format": FORMAT, "run": run_place(run_dir, config), "status": final.get("status"),
        "step": final.get("step"), "num_steps": final.get("num_steps"), **info,
        "packed_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "files": {name: digests.entry(content) for name, content in members.items()}}
    archive.parent.mkdir(parents=True, exist_ok=True)
    whole = _temporary(archive)
    try:
      with tarfile.open(whole, "w", format=tarfile.PAX_FORMAT) as tar:
        _add(tar, MANIFEST, json.dumps(manifest, indent=1, sort_keys=True).encode())
        for name, content in members.items():
          _add(tar, name, content.read_bytes() if isinstance(content, Path) else content)
      return install(_split(whole, archive), archive)
    finally:
      whole.unlink(missing_ok=True)  # split into parts, or left by an error


def _temporary(path: Path) -> Path:
  """Where `path` is written before it replaces anything: `NAME.tmp`, which `parts_of` never takes
  for a part (a part's suffix is a number)."""
  return path.with_name(path.name + ".tmp")


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
  info = tarfile.TarInfo(name)
  info.size, info.mode, info.mtime = len(data), 0o644, 0  # the same bytes from the same run
  tar.addfile(info, io.BytesIO(data))


def _split(whole: Path, archive: Path) -> list[tuple[Path, Path]]:
  """The new archive's files under temporary names, as (written, final name) pairs; on an error
  the parts written so far are removed."""
  size = whole.stat().st_size
  if size <= PART_BYTES:
    return [(whole, archive)]
  written = []
  try:
    with open(whole, "rb") as f:
      for index in range(1, -(-size // PART_BYTES) + 1):
        part = archive.with_name(f"{archive.name}.{index}")
        written.append((_temporary(part), part))
        _temporary(part).write_bytes(f.read(PART_BYTES))
  except BaseException:
    for temporary, _ in written:
      temporary.unlink(missing_ok=True)
    raise
  return written


def install(written: list[tuple[Path, Path]], archive: Path) -> list[Path]:
  """Moves a fully written archive's files (temporary name, final name) into place over the older
  archive `archive` names, then removes the older files that are not part of the new one (its
  FILE.pack when the new one is split, its part 3 when the new one has 2); returns the new files.
  """
  older = parts_of(archive, existing_only=True)
  for temporary, final in written:
    os.replace(temporary, final)
  new = [final for _, final in written]
  for path in older:
    if path not in new:
      path.unlink()
  return new


# ---------------------------------------------------------------------------------------------
# Unpacking.

def parts_of(archive: Path, *, existing_only: bool = False) -> list[Path]:
  """The files of the archive that FILE.pack or one of its parts FILE.pack.N names: [FILE.pack],
  or its parts in order.

  Raises:
    PackError (unless existing_only): none exists, or a part is missing from the sequence.
  """
  archive = Path(archive)
  match = _PART.match(archive.name)
  base = archive.with_name(match.group(1)) if match else archive
  numbered = {}
  for path in base.parent.glob(f"{_glob_escape(base.name)}.*"):
    suffix = path.name[len(base.name) + 1:]
    if suffix.isdigit():
      numbered[int(suffix)] = path
  if existing_only:
    return ([base] if base.is_file() else []) + [numbered[k] for k in sorted(numbered)]
  if base.is_file() and not numbered:
    return [base]
  if not numbered:
    raise PackError(f"no archive {base} (nor its parts {base.name}.1, .2, ...): pass the file "
                    "`lra pack` wrote")
  gaps = [k for k in range(1, max(numbered) + 1) if k not in numbered]
  if gaps:
    raise PackError(f"{base}: part {base.name}.{gaps[0]} is missing (found parts "
                    f"{', '.join(map(str, sorted(numbered)))}): copy every part beside the others")
  return [numbered[k] for k in sorted(numbered)]


def _glob_escape(name: str) -> str:
  return re.sub(r"([*?\[])", r"[\1]", name)


class _Joined(io.RawIOBase):
  """The parts of an archive read as one stream."""

  def __init__(self, paths: list[Path]):
    self._paths, self._file = list(paths), None

  def readable(self) -> bool:
    return True

  def readinto(self, buffer) -> int:
    while True:
      if self._file is None:
        if not self._paths:
          return 0
        self._file = open(self._paths.pop(0), "rb")  # pylint: disable=consider-using-with
      count = self._file.readinto(buffer)
      if count:
        return count
      self._file.close()
      self._file = None

  def close(self) -> None:
    if self._file is not None:
      self._file.close()
    super().close()


def read_manifest(archive: Path) -> dict[str, Any]:
  """The manifest of an archive (its first member), without reading the rest."""
  with _opened(parts_of(archive)) as tar:
    return _manifest(tar, archive)


@contextlib.contextmanager
def _opened(paths: list[Path]) -> Iterator[tarfile.TarFile]:
  stream = io.BufferedReader(_Joined(paths), buffer_size=1 << 20)
  try:
    with tarfile.open(fileobj=stream, mode="r|") as tar:
      yield tar
  except tarfile.TarError as error:
    raise PackError(f"{paths[0]}: not an archive `lra pack` wrote, or cut short ({error}); "
                    "copy it (and every part) again") from None
  finally:
    stream.close()


def _manifest(tar: tarfile.TarFile, archive: Path) -> dict[str, Any]:
  first = tar.next()
  if first is None or first.name != MANIFEST:
    raise PackError(f"{archive}: no {MANIFEST} first: not an archive `lra pack` wrote")
  manifest = json.loads(_read(tar, first))
  if manifest.get("format") != FORMAT:
    raise PackError(f"{archive}: archive format {manifest.get('format')}, this lra reads "
                    f"{FORMAT}: unpack it with the version that packed it")
  place = manifest.get("run", "")
  if not re.fullmatch(r"runs/[^/]+/[^/]+/[^/]+", place) or ".." in place.split("/"):
    raise PackError(f"{archive}: its run place {place!r} is not runs/<task>/<mixer>/<name>")
  return manifest


def _read(tar: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
  f = tar.extractfile(member)
  if f is None:
    raise PackError(f"{member.name}: not a file in the archive")
  return f.read()


def unpack(archive: Path, results_dir: Path | None,
           run_dir: Path | None = None) -> tuple[Path, dict[str, Any]]:
  """Puts an archive's run back at `results_dir/<its place>`, or at `run_dir` (a run made with
  `lra run --run-dir`, such as a study's); returns that folder and the manifest.

  Every member is checked against the manifest (size, sha256; none missing, none extra) in a
  temporary folder before anything is moved into place.

  Raises:
    PackError: a missing or damaged part, a file that does not match, or a run folder there that
      already holds checkpoints or another run's config.
    RunDirLocked: a live `lra run` holds that folder.
  """
  paths = parts_of(archive)
  with _opened(paths) as tar:
    manifest = _manifest(tar, archive)
    if run_dir is not None:
      target = Path(run_dir)
      scratch_parent = target.parent
    else:
      target = Path(results_dir) / manifest["run"]
      # Beside runs/, not in it: a folder left by a kill must not look like a run to the tables.
      scratch_parent = Path(results_dir)
    scratch_parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".unpack-", dir=scratch_parent) as scratch:
      files = manifest["files"]
      seen = set()
      for member in tar:  # the manifest again first: a TarFile lists what it has read
        name = member.name
        if name == MANIFEST and member.offset == 0:
          continue
        if (name not in files or name in seen or not member.isfile() or name.startswith("/")
            or ".." in Path(name).parts):
          raise PackError(f"{archive}: {name} is not in its manifest: not as `lra pack` wrote it")
        data = _read(tar, member)
        if digests.entry(data) != files[name]:
          raise PackError(f"{archive}: {name} differs from what was packed (size or sha256): "
                          "copy the archive and every part again")
        seen.add(name)
        out = Path(scratch) / name
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(data)
      missing = sorted(set(files) - seen)
      if missing:
        raise PackError(f"{archive}: ends before {missing[0]} ({len(missing)} file(s) missing): "
                        "a part is cut short or missing; copy every part again")
      _move_into(Path(scratch), target, archive)
  return target, manifest


def _move_into(scratch: Path, target: Path, archive: Path) -> None:
  with run_lock.RunDirLock(target):
    held = [p.name for p in (target / "checkpoints").glob("*")] if (
        target / "checkpoints").is_dir() else []
    if held:
      raise PackError(f"{target} already holds checkpoints ({', '.join(sorted(held)[:4])}): "
                      f"unpacking would mix two states. Unpack into another --results-dir, or "
                      f"delete {target / 'checkpoints'} first")
    theirs, ours = scratch / "config.json", target / "config.json"
    if ours.exists() and theirs.exists() and (json.loads(ours.read_text())
                                              != json.loads(theirs.read_text())):
      raise PackError(f"{target} holds another run's config.json than {archive}: unpack into "
                      "another --results-dir")
    for path in sorted(scratch.rglob("*")):
      if path.is_file():
        destination = target / path.relative_to(scratch)
        destination.parent.mkdir(parents=True, exist_ok=True)
        os.replace(path, destination)


# ---------------------------------------------------------------------------------------------
# The commands.

def resume_command(config: dict[str, Any], run_dir: Path) -> str | None:
  """The `lra run` command that resumes the run of `config` (its config.json) in `run_dir`: task,
  mixer (an own mixer by the spec it was named with), preset, seed, and the settings where it
  departs from the preset (run_identity.departures; the logging settings too); `lra pretrain` for
  a self-pretraining run, and a fine-tune's --init-from. None when the task or preset no longer
  exists here.

  An own mixer whose file is not at its spec here (yet) cannot give the preset's block of its
  settings: every setting of its block is then named, which resumes the same run.
  """
  from lra.runs import run_identity  # pylint: disable=import-outside-toplevel
  words = _run_words(config)
  if words is None:
    return None
  # A self-pretraining run resumes under `lra pretrain`, a fine-tune with the run it started from.
  phase, ours = run_identity.phase(config), run_identity.flatten(config)
  start = []
  if phase == "spt":
    start = ["--init-from", str(ours["spt.init_from"]),
             *(["--allow-partial"] if ours.get("spt.allow_partial") else [])]
  head, settings = words
  return shlex.join(["lra", "pretrain" if phase == "pretrain" else "run", *head, "--run-dir",
                     str(run_dir), *start, *settings])


def mixer_changed(config: dict[str, Any]) -> tuple[str, str] | None:
  """(sha256 the run recorded, sha256 of the file at its spec now, "" when it is not there or
  does not import) for a run of an own mixer whose file has changed since; None otherwise. Such
  a run cannot resume (its model would not be the one it trained, lra.models.build), and naming
  the old sha256 on the command line only moves the refusal later."""
  source = config.get("mixer_source") or {}
  if not source.get("sha256") or not source.get("spec"):
    return None
  from lra.models.mixers import find_mixer  # pylint: disable=import-outside-toplevel
  try:
    now = find_mixer(source["spec"]).source["sha256"]
  except (errors.UserError, OSError, ImportError):
    now = ""
  return None if now == source["sha256"] else (source["sha256"], now)


def new_run_command(config: dict[str, Any]) -> str | None:
  """The `lra run` of the same settings in a folder of its own (no --run-dir): what starts
  again a run that cannot resume. None as for resume_command."""
  from lra.runs import run_identity  # pylint: disable=import-outside-toplevel
  words = _run_words(config)
  if words is None:
    return None
  head, settings = words
  phase = run_identity.phase(config)
  start = []
  if phase == "spt":
    ours = run_identity.flatten(config)
    start = ["--init-from", str(ours["spt.init_from"]),
             *(["--allow-partial"] if ours.get("spt.allow_partial") else [])]
  return shlex.join(["lra", "pretrain" if phase == "pretrain" else "run", *head, *start,
                     *settings])


def changed_mixer_text(config: dict[str, Any], changed: tuple[str, str]) -> str:
  """What a run of a changed mixer file (mixer_changed) needs, in the words `lra status`, the
  tables, a dry run and the run itself all use: "the file of SPEC has changed since this run
  began (sha256 ...): restore it to resume, or start a new run with `...`"."""
  old, now = changed
  spec = config["mixer_source"]["spec"]
  state = f"now {now[:8]}" if now else "now not found or not importable here"
  new = new_run_command(config)
  return (f"the file of {spec} has changed since this run began (sha256 {old[:8]} then, {state}):"
          " restore it to resume" + (f", or start a new run with `{new}`" if new else ""))


def refusal(run_dir: Path, config: dict[str, Any], reference: dict[str, Any]) -> str | None:
  """Why `lra run` with `config` will not train in `run_dir` (None: it starts or resumes there),
  as the words after the folder's name; `lra run` raises it and its dry run prints it, so the
  two agree. `reference`: today's preset (lra.runs.config_loading.reference_config)."""
  from lra.runs import run_identity  # pylint: disable=import-outside-toplevel
  changed = mixer_changed(config)  # the command names the sha256 of an older file
  if changed:
    return f"cannot resume: {changed_mixer_text(config, changed)}"
  previous = Path(run_dir) / "config.json"
  if not previous.exists():
    return None
  from lra.runs import start  # pylint: disable=import-outside-toplevel
  stored, _ = start.read_run(Path(run_dir))  # a fine-tune as its recorded start says
  reasons = run_identity.same_run(stored, config, reference)
  if not reasons:
    return None
  changed = mixer_changed(stored)
  if changed and all("mixer_source." in reason for reason in reasons):
    return f"cannot resume: {changed_mixer_text(stored, changed)}"
  more = f", and {len(reasons) - 4} more" if len(reasons) > 4 else ""
  return (f"holds another run ({'; '.join(reasons[:4])}{more}); pass --run-dir for a new run, "
          "or delete that folder to start over")


def fine_tune_command(config: dict[str, Any], run_dir: Path, *, partial: bool = False
                      ) -> str | None:
  """The `lra run` command that fine-tunes from the self-pretraining run of `config` in
  `run_dir`: its task, mixer, preset, seed and settings (init_from.check asks for the same
  encoder and seed), `--allow-partial` when the pretraining is unfinished. None as for
  resume_command. The pretraining's own length and warm-up (train.num_steps, train.warmup_steps:
  its phase's budget, set from spt.pretrain_steps) are not the fine-tune's, which takes the
  preset's."""
  words = _run_words(config)
  if words is None:
    return None
  head, settings = words
  budget = ("--config.train.num_steps=", "--config.train.warmup_steps=")
  settings = [item for item in settings if not item.startswith(budget)]
  return shlex.join(["lra", "run", *head, "--init-from", str(run_dir),
                     *(["--allow-partial"] if partial else []), *settings])


def _run_words(config: dict[str, Any]) -> tuple[list[str], list[str]] | None:
  """(`TASK MIXER --preset P [--seed N]`, its `--config.KEY=VALUE` settings) that name the run of
  `config` as `lra run` resolves it; None when its task or preset is not here."""
  # pylint: disable=import-outside-toplevel
  from lra.runs import run_identity
  from lra.runs.config_loading import load_config, preset_reference
  source = config.get("mixer_source") or {}
  mixer = config["model"]["mixer"]
  reference = preset_reference(config)
  block = []
  if reference is None and source:
    try:
      reference = load_config(config["task"], config["preset"], "custom").to_dict()
    except (KeyError, ValueError, TypeError, OSError, ImportError):
      return None
    reference["model"]["mixer"] = mixer  # the mixer is named by its spec, not by a setting
    block = [f"mixers.{mixer}.{key}={value}" for key, value in config["mixers"][mixer].items()]
  if reference is None:
    return None
  ours, theirs = run_identity.flatten(config), run_identity.flatten(reference)
  # Where the curves also go is no identity but is the run's; a phase's budget keys are named by
  # its departures (train.num_steps), and a fine-tune's start by --init-from.
  logs = [f"{key}={ours[key]}" for key in ours.keys() & theirs.keys()
          if key.startswith("log.") and ours[key] != theirs[key]]
  # The mixer's file is named by its spec alone: a recorded sha256 on the command line would only
  # refuse to build a file that has changed since (mixer_changed says what to do then).
  settings = sorted(item for item in {*run_identity.departures(config, reference), *block, *logs}
                    if not item.startswith("mixer_source."))
  seed = ours.get(run_identity.SEED_KEY, 0)
  head = [config["task"], source.get("spec") or mixer, "--preset", config["preset"],
          *(["--seed", str(seed)] if seed else [])]
  return head, [f"--config.{item}" for item in settings]
