"""The byte-level tokeniser of Text and Retrieval: UTF-8 bytes + 1 as ids, 0 as padding.

Truncation cuts bytes, not characters, as in LRA: a multi-byte character may be split at the end.
"""
from __future__ import annotations

import numpy as np

PAD_ID = 0
VOCAB_SIZE = 257  # 256 byte values shifted by one, plus the pad id 0
DTYPE = np.uint16


def describe(length: int) -> str:
  """The tokeniser as recorded in meta.json (a change here re-prepares every byte cache)."""
  return f"utf-8 bytes + 1 (vocab 257, 0 = pad), truncated or padded to {length}"


def encode_into(row: np.ndarray, data: bytes) -> bool:
  """Writes the ids of `data` into `row[T]` (zeroing the tail) and says whether it was truncated."""
  length = row.shape[0]
  ids = np.frombuffer(data[:length], dtype=np.uint8)
  row[:len(ids)] = ids
  row[:len(ids)] += 1
  row[len(ids):] = PAD_ID
  return len(data) > length


def encode(text: str | bytes, length: int) -> np.ndarray:
  """The ids[T] of one document (str is UTF-8 encoded first)."""
  data = text.encode("utf-8") if isinstance(text, str) else text
  row = np.zeros(length, dtype=DTYPE)
  encode_into(row, data)
  return row


def decode(tokens: np.ndarray) -> str:
  """The text of ids[T]: pads dropped, bytes that are not valid UTF-8 shown as U+FFFD."""
  tokens = np.asarray(tokens).astype(np.int64)
  data = (tokens[tokens != PAD_ID] - 1).astype(np.uint8).tobytes()
  return data.decode("utf-8", errors="replace")
