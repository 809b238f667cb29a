"""Image: grayscale CIFAR-10 as 1024 pixel tokens, from the python pickles, their archive, or TFDS.

Grayscale is LRA's `tf.image.rgb_to_grayscale` on uint8 images, reproduced in float32: ITU-R 601
weights on pixels/255, then x255.5 and truncated. Validation is the last 10% of train in the
source's order (LRA: TFDS `train[90%:]`), giving 45k/5k/10k.
"""
from __future__ import annotations

import dataclasses
import io
import pickle
from pathlib import Path

import numpy as np

from lra import errors
from lra.tasks.sources import downloads, pixels, tfds_reader
from lra.tasks.contract.build import CacheWriter, Recipe, build
from lra.tasks.contract.fingerprint import sha256_of
from lra.tasks.sources.release import locate
from lra.tasks.contract.spec import Task

SIDE = 32
SEQ_LEN = SIDE * SIDE
NUM_CLASSES = 10
LABEL_NAMES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship",
               "truck")
RGB_WEIGHTS = np.array([0.2989, 0.5870, 0.1140], dtype=np.float32)
TRAIN_FRACTION = 0.9
TFDS_NAME = "cifar10"
TOKENIZER = ("grayscale = trunc(255.5 * sum(w * rgb / 255)) in float32, w = ITU-R 601 "
             "(0.2989, 0.5870, 0.1140), as tf.image.rgb_to_grayscale; pixels 0-255 as tokens, "
             "row-major 32x32")
URL = downloads.CIFAR10.url  # Krizhevsky 2009
COMMAND = ("lra data prepare image --source PATH   (PATH = cifar-10-batches-py/, "
           "cifar-10-python.tar.gz, or a TFDS data dir holding cifar10)")
BATCH_FILES = {"train": [f"data_batch_{i}" for i in range(1, 6)], "test": ["test_batch"]}


@dataclasses.dataclass(frozen=True)
class _Source:
  path: Path
  format: str  # "cifar-10-batches-py" | "cifar-10-python.tar.gz" | "tfds cifar10"


def to_grayscale(rgb: np.ndarray) -> np.ndarray:
  """uint8 rgb[N, 32, 32, 3] -> uint8 tokens[N, 1024], bit for bit as LRA's TensorFlow op.

  The sum runs r, g, b in float32; TensorFlow may fuse it differently, so a pixel within one
  float32 rounding of an integer boundary could differ by 1.
  """
  x = rgb.astype(np.float32) * np.float32(1.0 / 255)
  gray = x[..., 0] * RGB_WEIGHTS[0] + x[..., 1] * RGB_WEIGHTS[1] + x[..., 2] * RGB_WEIGHTS[2]
  return (gray * np.float32(255.5)).astype(np.uint8).reshape(len(rgb), -1)


class _ArrayUnpickler(pickle.Unpickler):
  """Loads dicts of NumPy arrays and nothing else: a pickle can otherwise run arbitrary code."""

  _ALLOWED = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
              ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"),
              ("numpy", "ndarray"), ("numpy", "dtype"),
              ("_codecs", "encode")}  # protocol-2 pickles written by Python 3 spell bytes this way

  def find_class(self, module, name):
    if (module, name) not in self._ALLOWED:
      raise pickle.UnpicklingError(f"refusing to load {module}.{name} from a CIFAR pickle")
    if module.startswith("numpy.core.") and hasattr(np, "_core"):
      module = "numpy._core." + module[len("numpy.core."):]  # numpy 2 name, without its warning
    return super().find_class(module, name)


def _unpickle_batch(data: bytes, where: str, path: Path, archive: bool) -> tuple[np.ndarray,
                                                                                 np.ndarray]:
  """(rgb[N, 32, 32, 3] uint8, labels[N]) of one CIFAR-10 python batch.

  `where` names the batch, `path` is the file read (the pickle, or the archive holding it,
  `archive`), whose size and sha256 a damaged batch's error gives.
  """
  try:
    batch = _ArrayUnpickler(io.BytesIO(data), encoding="bytes").load()
    images = np.asarray(batch.get(b"data", batch.get("data")))
    labels = np.asarray(batch.get(b"labels", batch.get("labels")), dtype=np.int64)
  except Exception as e:  # noqa: BLE001 - junk bytes make the unpickler raise almost anything
    raise downloads.damaged(path, downloads.CIFAR10, (f"{where} is " if archive else "") +
                            f"not a CIFAR-10 python batch ({type(e).__name__}: {e})", COMMAND,
                            inside=None if archive else downloads.CIFAR10) from None
  if images.dtype != np.uint8 or images.ndim != 2 or images.shape[1] != 3 * SEQ_LEN:
    raise errors.BadValue(f"{where}: expected b'data' uint8 [N, 3072], found {images.dtype} "
                          f"{list(images.shape)}.")
  if labels.shape != (len(images),) or labels.min(initial=0) < 0 or labels.max(initial=0) > 9:
    raise errors.BadValue(f"{where}: expected {len(images)} b'labels' in 0..9.")
  # The pickles store each image channel-major: 1024 red, 1024 green, 1024 blue values.
  return images.reshape(-1, 3, SIDE, SIDE).transpose(0, 2, 3, 1), labels


def _find(root: Path) -> _Source | None:
  """A supported CIFAR-10 copy at or directly inside root."""
  if root.is_file() and root.name.endswith((".tar.gz", ".tgz")):
    return _Source(root, "cifar-10-python.tar.gz")
  if not root.is_dir():
    return None
  if (root / "data_batch_1").exists() or root.name == "cifar-10-batches-py":
    return _Source(root, "cifar-10-batches-py")
  if (root / "cifar-10-batches-py").is_dir():
    return _Source(root / "cifar-10-batches-py", "cifar-10-batches-py")
  if (root / "cifar-10-python.tar.gz").is_file():
    return _Source(root / "cifar-10-python.tar.gz", "cifar-10-python.tar.gz")
  if root.name == TFDS_NAME:
    return _Source(root.parent, "tfds cifar10")
  if (root / TFDS_NAME).is_dir():
    return _Source(root, "tfds cifar10")
  return None


def _locate(source: Path) -> _Source:
  return locate(source, _find, "CIFAR-10: the cifar-10-batches-py/ folder (data_batch_1..5, "
                "test_batch), the cifar-10-python.tar.gz archive, or a TFDS data dir holding "
                "cifar10/<version>/", COMMAND, download=downloads.CIFAR10)


def _batch_paths(folder: Path) -> list[Path]:
  paths = [folder / name for names in BATCH_FILES.values() for name in names]
  missing = [p.name for p in paths if not p.is_file()]
  if missing:
    raise errors.NotFound(f"{folder} lacks {', '.join(missing)} (expected data_batch_1..5 and "
                          f"test_batch).\nTry: {COMMAND}")
  return paths


def _checksums(src: _Source) -> dict[str, str]:
  if src.format == "cifar-10-batches-py":
    return sha256_of(src.path, _batch_paths(src.path))
  if src.format == "cifar-10-python.tar.gz":
    return sha256_of(src.path.parent, [src.path])
  files = sorted(p for p in (src.path / TFDS_NAME).rglob("*") if p.is_file())
  if not any(p.name == "dataset_info.json" for p in files):
    raise errors.NotFound(
        f"TFDS data dir {src.path} has no prepared {TFDS_NAME} (expected {src.path / TFDS_NAME}"
        f"/<version>/dataset_info.json and its tfrecord files). This suite never downloads: "
        f"prepare cifar10 with TFDS yourself, or use the python pickles.\nTry: {COMMAND}")
  return sha256_of(src.path, files)


def _read(src: _Source) -> dict[str, tuple[np.ndarray, np.ndarray]]:
  """{"train"|"test": (tokens[N, 1024], labels[N])} in the source's order.

  Each batch is converted as soon as it is read, so only grayscale is held (60 MB, not 1 GB).
  """
  if src.format == "tfds cifar10":
    return _read_tfds(src.path)
  gray: dict[str, tuple[np.ndarray, np.ndarray]] = {}

  def add(name: str, blob: bytes, path: Path, archive: bool) -> None:
    rgb, labels = _unpickle_batch(blob, f"{src.path}/{name}", path, archive)
    gray[name] = (to_grayscale(rgb), labels)

  if src.format == "cifar-10-batches-py":
    for path in _batch_paths(src.path):
      add(path.name, path.read_bytes(), path, False)
  else:
    wanted = {name for names in BATCH_FILES.values() for name in names}
    with downloads.open_tar_gz(src.path, downloads.CIFAR10, COMMAND) as archive:
      for member in archive:
        name = Path(member.name).name
        if member.isfile() and name in wanted and Path(member.name).parent.name == (
            "cifar-10-batches-py"):
          add(name, archive.extractfile(member).read(), src.path, True)
    missing = sorted(wanted - set(gray))
    if missing:  # another archive (CIFAR-100's, say)
      raise downloads.damaged(src.path, downloads.CIFAR10, "lacks cifar-10-batches-py/"
                              f"{{{', '.join(missing)}}}", COMMAND)
  return {split: (np.concatenate([gray[n][0] for n in names]),
                  np.concatenate([gray[n][1] for n in names]))
          for split, names in BATCH_FILES.items()}


def _read_tfds(data_dir: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
  splits = tfds_reader.read_splits(TFDS_NAME, data_dir, "image",
                                   "cifar-10-batches-py/ or cifar-10-python.tar.gz")
  return {split: (to_grayscale(np.stack([np.asarray(im, dtype=np.uint8) for im in images])),
                  np.array(labels, dtype=np.int64))
          for split, (images, labels) in splits.items()}


def prepare(source: Path, out_dir: Path) -> dict:
  """Converts CIFAR-10 to grayscale tokens in the cache at out_dir and returns its meta.

  A no-op when the cache is current: same files (sha256), same conversion, arrays intact.
  """
  src = _locate(source)
  recipe = Recipe(task="image", source_path=src.path, source_format=src.format,
                  checksums=_checksums(src), options={}, tokenizer=TOKENIZER)

  def write(out: CacheWriter) -> dict:
    data = _read(src)
    train_tokens, train_labels = data["train"]
    num_train = int(round(TRAIN_FRACTION * len(train_tokens)))
    splits = {"train": (train_tokens[:num_train], train_labels[:num_train]),
              "val": (train_tokens[num_train:], train_labels[num_train:]),
              "test": data["test"]}
    counts = {}
    for split, (tokens, labels) in splits.items():
      out.write(split, "inputs", tokens)
      out.write(split, "label", labels.astype(np.int32))
      counts[split] = len(labels)
    print(f"image: prepared {counts} from {src.path} ({src.format}).", flush=True)
    return {"vocab_size": pixels.VOCAB_SIZE, "seq_len": SEQ_LEN, "num_classes": NUM_CLASSES,
            "dual": False, "pad_id": None, "splits": counts,
            "validation": "last 10% of train in the source's order (LRA: TFDS train[90%:])",
            "label_names": list(LABEL_NAMES)}

  return build(out_dir, recipe, write)


TASK = Task(
    name="image",
    description="Grayscale CIFAR-10 as 1024 pixel tokens, 10 classes",
    data_hint=f"Bring CIFAR-10 (nothing is downloaded; the official archive: {URL}), then run: "
              f"{COMMAND}",
    prepare=prepare,
    decode=pixels.decode,
)
