"""gmlm.core.draws.categorical at vocabulary sizes above the one-level limit (V > 64, the two-level
inverse CDF read straight from the logits): every draw is the index a float64 inverse CDF picks
for the same uniform (but within float32 rounding of a CDF boundary), -inf entries are never
drawn, and the empirical law of many draws passes the chi-square test against softmax(z)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from gmlm.core import draws


def _inverse_cdf_64(z_V: np.ndarray, u: float) -> tuple[int, float]:
  """(the float64 inverse-CDF index of u, the distance of u * total from the nearest CDF
  boundary, relative to the total)."""
  p = np.exp(z_V - z_V[np.isfinite(z_V)].max())
  p[~np.isfinite(z_V)] = 0.0
  cdf = np.cumsum(p)
  target = u * cdf[-1]
  idx = int(np.searchsorted(cdf, target, side="right"))
  return min(idx, len(z_V) - 1), float(np.min(np.abs(cdf - target)) / cdf[-1])


@pytest.mark.parametrize("V", [65, 1000, 30522])  # not a square; a square's neighbour; BERT's
def test_each_draw_is_the_float64_inverse_cdf_of_its_uniform(V):
  rng = np.random.default_rng(V)
  R = 64
  z_RV = rng.normal(size=(R, V)).astype(np.float32) * 3
  z_RV[:, rng.random(V) < 0.3] = -np.inf  # non-candidates
  z_RV[0, :-1], z_RV[0, -1] = -np.inf, 0.0  # all mass on the last entry (the leftover block)
  u_R = rng.random(R).astype(np.float32)
  u_R[1] = 0.0
  u_R[2] = np.nextafter(np.float32(1), np.float32(0))
  got = np.asarray(draws.categorical_from_uniform(jnp.asarray(u_R), jnp.asarray(z_RV)))
  close = 0
  for r in range(R):
    want, gap = _inverse_cdf_64(z_RV[r].astype(np.float64), float(u_R[r]))
    assert np.isfinite(z_RV[r, got[r]]), "an entry of zero mass was drawn"
    if gap > 1e-5:  # float32 rounding (~1e-7 a term, ~sqrt(V) terms) moves draws only this close
      assert got[r] == want, (r, got[r], want)
    else:
      close += 1
  assert got[0] == V - 1
  assert close <= R // 4  # the comparison above covers most rows


def test_the_law_of_many_draws_is_softmax_of_the_logits():
  rng = np.random.default_rng(0)
  V, n = 300, 200_000
  z_V = rng.normal(size=V).astype(np.float32) * 1.5
  z_V[::7] = -np.inf
  p_V = np.exp(z_V - z_V[np.isfinite(z_V)].max())
  p_V /= p_V.sum()
  idx = np.asarray(draws.categorical(jax.random.key(1), jnp.broadcast_to(jnp.asarray(z_V), (n, V))))
  counts = np.bincount(idx, minlength=V)
  assert counts[p_V == 0].sum() == 0
  support = p_V > 0
  # Cells of expected count >= 5 (chi-square's validity), the rest pooled into one cell.
  big = support & (p_V * n >= 5)
  obs = np.append(counts[big], counts[support & ~big].sum())
  exp = np.append(p_V[big] * n, p_V[support & ~big].sum() * n)
  chi2 = ((obs - exp) ** 2 / exp).sum()
  dof = len(obs) - 1
  assert chi2 < stats.chi2.ppf(0.999, dof), (chi2, dof)  # the null's 99.9% quantile


@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 64, 176)])
def test_argmax_is_numpys_first_index_of_the_maximum_ties_and_nans_included(shape):
  """draws.argmax against numpy's argmax: small integer values make ties common (the first
  maximal index wins), and some rows carry NaNs (numpy returns the first NaN)."""
  rng = np.random.default_rng(len(shape))
  x = rng.integers(-3, 4, size=shape).astype(np.float32)
  flat = x.reshape(-1, shape[-1])
  flat[::4, rng.integers(0, shape[-1])] = np.nan
  flat[1::5, :] = -np.inf
  got = np.asarray(jax.jit(draws.argmax)(jnp.asarray(x)))
  assert got.dtype == np.int32
  np.testing.assert_array_equal(got, np.argmax(x, axis=-1))
