"""Mixer registry: `MIXERS[name]` is the Linen module class in models/mixers/<name>.py.

Every mixer is built as `cls(dim=, num_heads=, max_len=, **config.mixers.<name>)`
and called as `mixer(x[B,T,D], mask[B,T], deterministic=..., carry=...) -> (y[B,T,D], carry)`.

A mixer from outside the suite is named the same way wherever a MIXER is asked for:
`path/to/file.py:ClassName`, `module.path:ClassName`, or the name an installed package gives it in
the `lra.mixers` entry-point group (`[options.entry_points] lra.mixers = gated = pkg.mod:Gated`).
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib
import importlib.metadata
import importlib.util
import inspect
import os
import shlex
import sys
import sysconfig
import traceback
from pathlib import Path
from typing import Any

import flax.linen as nn

from lra import errors
from lra.models.mixers import (bigbird, cheap_linear, latte, latte_macchiato, latte_rglru,
                               latte_rglru_swa, linear, linformer, local, longformer, luna, mega,
                               performer, reformer, s5, sinkhorn, softmax, sparse, synthesizer)

MIXERS: dict[str, type[nn.Module]] = {
    "softmax": softmax.SoftmaxMixer,
    "latte": latte.LatteMixer,
    "latte_macchiato": latte_macchiato.LatteMacchiatoMixer,
    "latte_rglru": latte_rglru.LatteRGLRUMixer,
    "latte_rglru_swa": latte_rglru_swa.LatteRGLRUSWAMixer,
    "linear": linear.LinearMixer,
    "performer": performer.PerformerMixer,
    "linformer": linformer.LinformerMixer,
    "luna": luna.LunaMixer,
    "longformer": longformer.LongformerMixer,
    "bigbird": bigbird.BigBirdMixer,
    "reformer": reformer.ReformerMixer,
    "s5": s5.S5Mixer,
    "mega": mega.MegaMixer,
    "cheap_linear": cheap_linear.CheapLinearMixer,
    # The rest of LRA's Table 1.
    "local": local.LocalMixer,
    "sparse": sparse.SparseMixer,
    "sinkhorn": sinkhorn.SinkhornMixer,
    "synthesizer": synthesizer.SynthesizerMixer,
}
ENTRY_POINT_GROUP = "lra.mixers"
# Fields the encoder sets; every other field with a plain default is a config setting.
CONTRACT_FIELDS = ("dim", "num_heads", "max_len")
_FORMS = ("path/to/file.py:ClassName, module.path:ClassName or the name of an installed "
          f"'{ENTRY_POINT_GROUP}' entry point")


@dataclasses.dataclass(frozen=True)
class FoundMixer:
  """What a MIXER argument names.

  Attributes:
    key: its config block `config.mixers.<key>` and `config.model.mixer`: the registered or
      entry-point name, or the class name of an import path.
    cls: the Linen module class.
    source: None for the suite's own mixers; otherwise what a run records so its results say what
      ran: `spec` (the argument, which finds it again), `sha256` (of the file defining the class)
      and, for entry points, `import` and `distribution`.
  """
  key: str
  cls: type[nn.Module]
  source: dict[str, str] | None = None


def entry_points() -> dict[str, importlib.metadata.EntryPoint]:
  """Installed mixers by entry-point name (the suite's own names win over these)."""
  return {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
          if ep.name not in MIXERS}


def find_mixer(spec: str) -> FoundMixer:
  """The mixer a MIXER argument names (see the module docstring), checked against the contract."""
  if spec in MIXERS:
    return FoundMixer(spec, MIXERS[spec])
  installed = entry_points()
  if spec in installed:
    ep = installed[spec]
    with _importing(spec, f"python -c 'import {ep.module}'"):
      loaded = ep.load()
    cls = _check_contract(loaded, f"entry point '{ep.name} = {ep.value}'")
    dist = f"{ep.dist.name}=={ep.dist.version}" if ep.dist else ""
    return FoundMixer(spec, cls, {"spec": spec, "import": ep.value, "distribution": dist,
                                  "sha256": _sha256(inspect.getsourcefile(cls))})
  where, sep, name = spec.rpartition(":")
  if not sep and spec.endswith(".py"):  # a file without its class: say which classes it has
    path = Path(os.path.normpath(spec))
    found = _module_classes(_import_file(path.expanduser(), spec))
    example = (f" e.g. {path.as_posix()}:{found[0]}" if found else "")
    raise errors.UnknownName(f"Mixer '{spec}' names a file, not a class in it: pass "
                             f"{path.as_posix()}:ClassName,{example} (Module classes there: "
                             f"{', '.join(found) or 'none'}).")
  if not sep or not where or not name.isidentifier():
    valid = ", ".join([*MIXERS, *installed])
    raise errors.UnknownName(f"Unknown mixer '{spec}'. Valid mixers: {valid}; or your own as "
                             f"{_FORMS}.")
  if where.endswith(".py") or "/" in where or os.sep in where:
    path = Path(os.path.normpath(where))
    spec = f"{path.as_posix()}:{name}"
    module = _import_file(path.expanduser(), spec)
  else:
    try:
      with _importing(spec, f"python -c 'import {where}'", missing=where):
        module = importlib.import_module(where)
    except ModuleNotFoundError as e:  # the module itself (one it imports is a MixerImportError)
      raise errors.UnknownName(f"Mixer '{spec}': no module {where} on the Python path ({e}). For a "
                               "file, pass path/to/file.py:ClassName.") from None
  if not isinstance(getattr(module, name, None), type):
    found = _module_classes(module)
    raise errors.UnknownName(f"Mixer '{spec}': {where} has no class {name}. Module classes there: "
                             f"{', '.join(found) or 'none'}.")
  cls = _check_contract(getattr(module, name), spec)
  if name in MIXERS:
    raise errors.BadValue(f"Mixer '{spec}': its class name is a registered mixer's name, which "
                          "names its config block; rename the class.")
  return FoundMixer(name, cls, {"spec": spec, "sha256": _sha256(inspect.getsourcefile(cls))})


def _module_classes(module: Any) -> list[str]:
  """The Flax module classes a module defines, those with the contract's fields (dim,
  num_heads, max_len) first."""
  found = [v for v in vars(module).values() if isinstance(v, type) and issubclass(v, nn.Module)
           and v.__module__ == module.__name__]
  fields = lambda cls: {f.name for f in dataclasses.fields(cls)}  # noqa: E731
  return [v.__name__ for v in sorted(found, key=lambda v: not set(CONTRACT_FIELDS) <= fields(v))]


def get_mixer(spec: str) -> type[nn.Module]:
  """The class a MIXER argument names, or an error listing the valid names."""
  return find_mixer(spec).cls


def default_settings(cls: type[nn.Module]) -> dict[str, Any]:
  """A mixer's config block: its fields beyond dim, num_heads, max_len, at their defaults.

  Fields whose default is not a plain value (bool, int, float, str, None), such as initialisers,
  stay out of the block: they keep their default and are not set from the command line.
  """
  settings = {}
  for field in dataclasses.fields(cls):
    if field.name in (*CONTRACT_FIELDS, "parent", "name") or not field.init:
      continue
    if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
      raise errors.BadValue(f"{cls.__name__}.{field.name} has no default; give it one (it is "
                            f"set as --config.mixers.{cls.__name__}.{field.name}=...).")
    if field.default is None or isinstance(field.default, (bool, int, float, str)):
      settings[field.name] = field.default
  return settings


def execution_path(key: str, settings: dict[str, Any], dtype: str, *,
                   head_dim: int | None = None) -> str:
  """How mixer `key` computes with this config block and compute dtype on this process's backend,
  for run and bench records: e.g. softmax's "cudnn", "xla", "einsum (one piece)" or "einsum
  (query chunks of 128)"; "" for a mixer with one way (no `execution_path` classmethod) or one
  outside the registry. `head_dim` (model.dim / model.num_heads) lets softmax check cuDNN's
  head-dim limit; without it that limit is assumed met."""
  describe_path = getattr(MIXERS.get(key), "execution_path", None)
  return describe_path(settings, dtype, head_dim) if describe_path else ""


def describe(name: str) -> str:
  """One line for `lra list`: the first line of the class docstring."""
  return ((get_mixer(name).__doc__ or "").strip().splitlines() or [""])[0]


def _check_contract(cls: Any, what: str) -> type[nn.Module]:
  fields = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
  if not (isinstance(cls, type) and issubclass(cls, nn.Module)) or not set(
      CONTRACT_FIELDS) <= fields:
    raise errors.BadValue(f"Mixer {what} is not a mixer: expected a flax.linen.Module with fields "
                          f"{', '.join(CONTRACT_FIELDS)} (found {getattr(cls, '__name__', cls)!r} "
                          f"with fields {sorted(fields - {'parent', 'name'})}).")
  return cls


class MixerImportError(errors.BadValue):
  """A mixer's own module (or one it imports) fails to import: one line naming the file and line
  where it failed, not the suite's import machinery."""


@contextlib.contextmanager
def _importing(spec: str, full_traceback: str, missing: str | None = None):
  """Turns an exception raised while importing a user's module into a MixerImportError that
  points at the user's code: `file:line: Type: message`, the line being the innermost frame of
  the user's own files (not the suite's, Python's or an installed package's; a SyntaxError names
  its own). `full_traceback` is the command that shows the whole traceback. A ModuleNotFoundError
  for `missing` itself (the module named by the spec) passes through: the caller says which
  modules exist."""
  try:
    yield
  except Exception as e:  # noqa: BLE001 - a user's module may raise anything at import
    if isinstance(e, ModuleNotFoundError) and missing and e.name and (
        missing + ".").startswith(e.name + "."):
      raise
    context = [f"importing mixer '{spec}'", f"the whole traceback: {full_traceback}"]
    if isinstance(e, SyntaxError) and e.filename:
      where, message = f"{_shown(e.filename)}:{e.lineno}", e.msg
    else:
      frames = [f for f in traceback.extract_tb(e.__traceback__) if _users(f.filename)]
      where = f"{_shown(frames[-1].filename)}:{frames[-1].lineno}" if frames else spec
      message = (str(e).splitlines() or [""])[0]
      if len(frames) > 1:  # a helper module of the user's, imported by the mixer's file
        context.insert(0, "imported from " + ", ".join(
            f"{_shown(f.filename)}:{f.lineno}" for f in reversed(frames[:-1])))
    raise MixerImportError(f"{where}: {type(e).__name__}: {message} ({'; '.join(context)})"
                           ) from None


def _users(filename: str) -> bool:
  """Whether a traceback frame's file is the user's: not importlib's (frozen), not the suite's,
  not Python's own library or an installed package."""
  if filename.startswith("<"):
    return False
  path = os.path.abspath(filename)
  libraries = {sysconfig.get_path(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
  suite = {os.path.dirname(sys.modules[name].__file__) for name in _SUITE_PACKAGES
           if getattr(sys.modules.get(name), "__file__", None)}
  return not any(path.startswith(os.path.join(d, "")) for d in libraries | suite if d)


def _shown(filename: str) -> str:
  """A file as the user named it: relative to the working folder when it lies inside it."""
  relative = os.path.relpath(filename)
  return filename if relative.startswith("..") else relative


_SUITE_PACKAGES = ("lra", "lra.models", "lra.tasks", "lra.configs")
_FILE_MODULES: dict[tuple[Path, str], Any] = {}


def _import_file(path: Path, spec: str):
  """The module in `path`, imported once per content (an edited file is imported again)."""
  if not path.is_file():
    raise errors.NotFound(f"Mixer '{spec}': no file {path}; expected path/to/file.py:ClassName.")
  digest = _sha256(path)
  key = (path.resolve(), digest)
  if key not in _FILE_MODULES:
    name = f"lra_user_mixer_{path.stem}_{digest[:8]}"
    module_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module  # dataclasses (so Flax modules) look their module up while built
    try:
      with _importing(spec, f"python {shlex.quote(str(path))}"):
        module_spec.loader.exec_module(module)
    except BaseException:
      del sys.modules[name]
      raise
    _FILE_MODULES[key] = module
  return _FILE_MODULES[key]


def _sha256(path: str | os.PathLike | None) -> str:
  return hashlib.sha256(Path(path).read_bytes()).hexdigest() if path else ""
