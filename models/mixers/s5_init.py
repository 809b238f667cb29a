"""S5's initial state matrix: HiPPO-LegS made normal, diagonalised, tiled into J blocks.

Smith et al. 2023 (S5), Section 4.3 and Appendix B, after Gu et al. (S4, HiPPO): the HiPPO-LegS
matrix A (A_nk = -sqrt(2n+1) sqrt(2k+1) below the diagonal, -(n+1) on it) plus the rank-one
p p^T with p_n = sqrt(n + 1/2) is S = -I/2 + (a skew-symmetric matrix), the "HiPPO-N" matrix.
S is normal, so S = V diag(Lambda) V* with V unitary and Lambda = -1/2 + i omega. Its eigenvalues
come in conjugate pairs, so a real input and output need only one of each pair (P/2 modes, the
output taken as 2 Re(C x)). Everything here runs once on the host in float64.
"""
from __future__ import annotations

import numpy as np

from lra import errors


def hippo_legs(n: int) -> np.ndarray:
  """[n,n] the HiPPO-LegS state matrix A (lower triangular, negative diagonal -(n+1))."""
  root = np.sqrt(2 * np.arange(n) + 1.0)
  return -(np.tril(np.outer(root, root)) - np.diag(np.arange(n)))


def hippo_n(n: int) -> np.ndarray:
  """[n,n] S = A + p p^T with p_k = sqrt(k + 1/2): the normal part of HiPPO-LegS."""
  p = np.sqrt(np.arange(n) + 0.5)
  return hippo_legs(n) + np.outer(p, p)


def diagonalise_hippo_n(n: int) -> tuple[np.ndarray, np.ndarray]:
  """Eigenvalues and eigenvectors of HiPPO-N: S = V diag(Lambda) V*.

  The skew-symmetric part's eigenvectors come from the Hermitian matrix -i S (so V is unitary,
  which a general eigensolver would not guarantee); the real part is S's constant diagonal -1/2.
  Returns:
    Lambda [n] complex, imaginary parts ascending (conjugates pair index i with n-1-i);
    V [n,n] complex, unitary.
  """
  s = hippo_n(n)
  omega, v = np.linalg.eigh(-1j * s)
  return np.mean(np.diag(s)) + 1j * omega, v


def block_diagonal_init(state_size: int, blocks: int) -> tuple[np.ndarray, np.ndarray,
                                                                  np.ndarray]:
  """S5's initial Lambda with J copies of HiPPO-N of size P/J on the diagonal, conjugates dropped.

  Args:
    state_size: P, the state size before conjugate symmetry halves it.
    blocks: J, the number of HiPPO-N blocks (P/J must be even).
  Returns:
    Lambda [P/2] complex: per block, the half of HiPPO-N's eigenvalues with negative imaginary
      parts (the other half are their conjugates);
    V [P,P/2] and V_inv [P/2,P]: block-diagonal eigenvectors of those modes and their conjugate
      transposes, to express a real B (P x D) as V_inv B and a real C (D x P) as C V.
  """
  if state_size % blocks or (state_size // blocks) % 2:
    raise errors.BadValue(f"s5: state_size={state_size} must be an even multiple of "
                          f"blocks={blocks} (P/J modes per block, kept in conjugate pairs); e.g. "
                          "--config.mixers.s5.state_size=256 --config.mixers.s5.blocks=8.")
  size = state_size // blocks
  lam, v = diagonalise_hippo_n(size)
  lam, v = lam[: size // 2], v[:, : size // 2]
  big_v = np.kron(np.eye(blocks), v)  # J copies of v on the diagonal
  return np.tile(lam, blocks), big_v, big_v.conj().T
