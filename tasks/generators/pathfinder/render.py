"""Drawing a scene (antialiased paddles and disk markers, max-composited) and 8-bit PNG encoding.

Shapes are drawn on the supersampled grid with a one-cell soft edge (dashes as flat-ended bars,
markers as disks), composited by max, then box-downsampled to the output resolution.
"""
from __future__ import annotations

import functools
import math
import struct
import zlib

import numpy as np

from lra.tasks.generators.pathfinder.geometry import Scene, Tables, paddle_ends, tables
from lra.tasks.generators.pathfinder.params import Params


@functools.lru_cache(maxsize=None)
def _window(size: int) -> tuple[np.ndarray, np.ndarray]:
  yy, xx = np.mgrid[0:size, 0:size]
  return yy.ravel(), xx.ravel()


def _stamp(canvas: np.ndarray, width: int, top: np.ndarray, left: np.ndarray, size: int,
           values_fn) -> None:
  """Max-composites `values_fn(py, px)` ([N, size*size]) over N windows at (top, left)."""
  wy, wx = _window(size)
  py = top[:, None] + wy[None, :]
  px = left[:, None] + wx[None, :]
  values = values_fn(py.astype(np.float64), px.astype(np.float64))
  keep = values > 0
  np.maximum.at(canvas, (py * width + px)[keep], values[keep])


def render(p: Params, scene: Scene) -> np.ndarray:
  """The image of a scene, uint8 [resolution, resolution]."""
  t: Tables = tables(p)
  s = t.scale
  canvas = np.zeros(t.width * t.width, dtype=np.float32)
  half = p.paddle_thickness / 2 * s
  start, end = paddle_ends(p, t, scene.centre, scene.angle)
  contrast = p.snake_contrast * p.paddle_contrast
  size = int(math.ceil(p.paddle_length * s + 2 * half + 2)) + 2
  top = np.floor(np.minimum(start[:, 0], end[:, 0]) - half - 1).astype(np.int64)
  left = np.floor(np.minimum(start[:, 1], end[:, 1]) - half - 1).astype(np.int64)
  a, b = start[:, None, :], end[:, None, :]
  length = p.paddle_length * s

  def dash(py, px):  # flat-ended bar: soft edge across and along, so the gaps stay visible
    along = ((py - a[..., 0]) * (b[..., 0] - a[..., 0]) + (px - a[..., 1]) * (b[..., 1] - a[..., 1])
             ) / length
    across = np.abs((py - a[..., 0]) * (b[..., 1] - a[..., 1])
                    - (px - a[..., 1]) * (b[..., 0] - a[..., 0])) / length
    return (contrast * np.clip(half + 0.5 - across, 0, 1)
            * np.clip(np.minimum(along, length - along) + 0.5, 0, 1))

  _stamp(canvas, t.width, top, left, size, dash)

  radius = p.marker_radius * s
  size = int(math.ceil(2 * radius + 2)) + 2
  m = scene.markers
  top = np.floor(m[:, 0] - radius - 1).astype(np.int64)
  left = np.floor(m[:, 1] - radius - 1).astype(np.int64)
  _stamp(canvas, t.width, top, left, size, lambda py, px: np.clip(
      radius + 0.5 - np.hypot(py - m[:, 0:1], px - m[:, 1:2]), 0, 1))

  n = p.resolution
  inner = canvas.reshape(t.width, t.width)[t.pad:t.pad + n * s, t.pad:t.pad + n * s]
  pooled = inner.reshape(n, s, n, s).mean(axis=(1, 3))
  return np.rint(np.clip(pooled, 0, 1) * 255).astype(np.uint8)


def _chunk(kind: bytes, data: bytes) -> bytes:
  return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def encode_png(image: np.ndarray) -> bytes:
  """An 8-bit grayscale PNG of a uint8 [H, W] image (no filtering; zlib level 6)."""
  h, w = image.shape
  rows = np.zeros((h, w + 1), dtype=np.uint8)  # a 0 filter byte leads each row
  rows[:, 1:] = image
  header = struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0)
  return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header)
          + _chunk(b"IDAT", zlib.compress(rows.tobytes(), 6)) + _chunk(b"IEND", b""))
