"""The files users download, and what a damaged one says: one line with its size and SHA-256 beside
the published ones (docs/data.md) and where to fetch it again, never a traceback.

A download that is junk, cut short, another archive, or holds a pickle or table that cannot be
read is the user's to fetch again (lra/errors.py: a mistake, exit 2), so every reader of
`--source` files raises `damaged(...)` instead of the reading library's own error.
"""
from __future__ import annotations

import contextlib
import dataclasses
import gzip
import tarfile
import zlib
from collections.abc import Iterator
from pathlib import Path

from lra import errors
from lra.base.manifest import sha256_file


@dataclasses.dataclass(frozen=True)
class Download:
  """A file a task reads, as its publisher gives it (size, sha256: None where unpublished)."""
  name: str
  url: str
  size: int | None
  sha256: str | None
  unpack: str  # the command that unpacks it
  note: str = ""  # what is known where nothing is published

  def published(self) -> str:
    """What the publisher gives, from docs/data.md, as "the official NAME is ..." reads on:
    "84,125,825 bytes, sha256 c40f..." or "of unpublished size and checksum (about 7.7 GB)"."""
    if self.size and self.sha256:
      return f"{self.size:,} bytes, sha256 {self.sha256}"
    return "of unpublished size and checksum" + (f" ({self.note})" if self.note else "")


# The figures are docs/data.md's table (tests/test_data_sources.py holds them equal).
ACLIMDB = Download("aclImdb_v1.tar.gz", "https://ai.stanford.edu/~amaas/data/sentiment/"
                   "aclImdb_v1.tar.gz", 84_125_825,
                   "c40f74a18d3b61f90feba1e17730e0d38e8b97c05fde7008942e91923d1658fe",
                   "tar xzf aclImdb_v1.tar.gz")
CIFAR10 = Download("cifar-10-python.tar.gz", "https://www.cs.toronto.edu/~kriz/"
                   "cifar-10-python.tar.gz", 170_498_071,
                   "6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce",
                   "tar xzf cifar-10-python.tar.gz")
# The LRA authors publish neither its size nor a checksum; third-party READMEs say 7.7 GB.
LRA_RELEASE = Download("lra_release.gz", "https://storage.googleapis.com/long-range-arena/"
                       "lra_release.gz", None, None, "tar xzf lra_release.gz",
                       "about 7.7 GB by third-party READMEs")
KNOWN = (ACLIMDB, CIFAR10, LRA_RELEASE)
# Files larger than this are not hashed for an error's sake when nothing published compares.
_HASH_UNPUBLISHED_MAX = 1 << 30


def facts(path: Path, download: Download | None = None) -> str:
  """"1,234 bytes, sha256 <hex>" of the file at `path` (the hash left out of a large file whose
  publisher gives none to compare with)."""
  size = path.stat().st_size
  if download is not None and download.sha256 is None and size > _HASH_UNPUBLISHED_MAX:
    return f"{size:,} bytes"
  return f"{size:,} bytes, sha256 {sha256_file(path)}"


def identify(path: Path) -> Download | None:
  """The known download this file is, by size then sha256 (None when it is none of them)."""
  size = path.stat().st_size
  for known in KNOWN:
    if known.size == size and known.sha256 and sha256_file(path) == known.sha256:
      return known
  return None


def damaged(path: Path, download: Download, problem: str, command: str, *,
            inside: Download | None = None, line: int | None = None) -> errors.BadValue:
  """The one-line error for a --source file that is not what it should be.

  Args:
    path: the file as read (an archive, or a file unpacked from one).
    download: what the file should be (or the archive it was unpacked from, `inside` then set).
    problem: what is wrong, in a few words ("not a gzip file", "cut short ...").
    command: the prepare command to run once the file is fetched again.
    inside: set when `path` is a file unpacked from `download` (a CIFAR pickle): the fix is to
      fetch and unpack the archive again.
    line: the line of `path` that is wrong (named as path:line; the last line says it may be cut
      short).
  """
  path = Path(path)
  other = identify(path) if path.is_file() and inside is None else None
  if other is not None and other is not download:
    return errors.BadValue(f"{path} is {other.name} (its size and sha256 match), not "
                           f"{download.name}: {problem}. Point --source at {download.name} "
                           f"({download.url}); then: {command}")
  where = f"{path}:{line}" if line else str(path)
  problem += cut_short(path, line) if line else ""
  return errors.BadValue(f"{where}: {problem}" + refetch(path, download, command, inside=inside))


def refetch(path: Path, download: Download, command: str, *,
            inside: Download | None = None) -> str:
  """What follows a damaged file's problem: "; the file: <size, sha256>; <the published ones>.
  Damaged or incomplete? <how to fetch it again>, then: <command>"."""
  found = facts(path, download) if Path(path).is_file() else "a folder"
  if inside is None:
    expected = f"the official {download.name} is {download.published()} (docs/data.md)"
    fetch = f"download it again from {download.url}"
  else:
    expected = f"it comes from {download.name}, {download.published()} (docs/data.md)"
    fetch = f"download {download.url} again and unpack it ({download.unpack})"
  return f"; the file: {found}; {expected}. Damaged or incomplete? {fetch}, then: {command}"


def _reason(error: BaseException) -> str:
  if isinstance(error, gzip.BadGzipFile):
    return "not a gzip file"
  if isinstance(error, EOFError):
    return "cut short (the compressed data ends before its end marker)"
  if isinstance(error, zlib.error):
    return f"corrupt compressed data ({error})"
  text = str(error)
  if text == "empty file":
    return "an empty archive"
  if "header" in text:
    return f"gzip-compressed but not a tar archive ({text})"
  return f"not a readable tar archive ({text})"


@contextlib.contextmanager
def open_tar_gz(path: Path, download: Download, command: str) -> Iterator[tarfile.TarFile]:
  """The members of a .tar.gz, streamed; a file that is not one, or is cut short anywhere (the
  gzip stream is read to its end marker and checksum), raises `damaged(...)`.

  Only the reading library's errors are turned into that one line; the caller's own (a member
  that is no CIFAR pickle) pass through as raised.
  """
  try:
    with gzip.open(path, "rb") as stream:
      with tarfile.open(fileobj=stream, mode="r|") as archive:
        yield archive
      while stream.read(1 << 20):  # past tar's end blocks, to the gzip trailer (its CRC)
        pass
  except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as error:
    raise damaged(path, download, _reason(error), command) from None


def text_table(path: Path, expected: str, download: Download, command: str) -> Iterator[str]:
  """The lines of a UTF-8 table (a TSV), each with its end; a file that is not UTF-8 text raises
  `damaged(...)` naming the first bad byte."""
  with open(path, "rb") as f:
    for number, raw in enumerate(f, start=1):
      try:
        yield raw.decode("utf-8")
      except UnicodeDecodeError as error:
        raise damaged(path, download, f"not {expected}: not UTF-8 text (byte "
                      f"{raw[error.start]:#04x})", command, inside=download,
                      line=number) from None


def cut_short(path: Path, number: int) -> str:
  """" (its last line: ...)" when line `number` is the file's last, else ""."""
  with open(path, "rb") as f:
    lines = sum(1 for _ in f)
  return " (its last line: the file may be cut short)" if number >= lines else ""
