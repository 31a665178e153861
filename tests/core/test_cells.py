"""The cells a host estimator measures (core/cells.py): the same galaxies and noise as the
forward model's stamps, a pure-noise image from the same seed, the PSF image; GalSim is
the rendering oracle."""

from __future__ import annotations

import numpy as np
import pytest

from shearbatch.core.cells import cell_window, simulate_cells
from shearbatch.core.generators import simulate
from shearbatch.schema import parse_config
from shearbatch.spec import truth_problem

galsim = pytest.importorskip("galsim")

CFG = {
    "image": {"pixel_scale": 0.263, "size_x": 12, "size_y": 12, "n_objects": 2,
              "noise": {"sigma": 1e-3}},
    "psf": {"type": "Moffat", "fwhm": 0.9, "beta": 3.5, "e1": 0.02, "e2": -0.01},
    "gal": {"flux": {"type": "LogNormal", "mean": 1.0, "sigma": 0.2},
            "half_light_radius": {"type": "Uniform", "min": 0.25, "max": 0.35},
            "ellipticity": {"e1": {"type": "Normal", "sigma": 0.2},
                            "e2": {"type": "Normal", "sigma": 0.2}},
            "position": {"type": "Normal", "x": 6.0, "y": 6.0, "sigma": 0.3}},
}  # fmt: skip
GS = galsim.GSParams(folding_threshold=1e-7, maxk_threshold=1e-10, kvalue_accuracy=1e-12)
SEEDS, G, CELL = [3, 3, 4], [(0.02, -0.01), (-0.02, 0.01), (0.02, -0.01)], 32


@pytest.fixture(scope="module")
def drawn():
    prob = truth_problem(parse_config(CFG))
    return prob, simulate_cells(prob, CELL, SEEDS, G), simulate(prob, SEEDS, G)


def test_the_window_is_the_stamp(drawn):
    """The cell's central window holds the forward model's stamp: same galaxy, same noise
    field (to the stamp renderer's accuracy, far below the noise)."""
    prob, cells, sim = drawn
    rows, cols = cell_window(prob, CELL)
    d = np.abs(cells.images[:, :, rows, cols] - np.asarray(sim.images)).max()
    assert d < 0.02 * prob.noise_sigma, d


def test_cells_against_galsim(drawn):
    """The noiseless cell (the cell minus its noise field) is GalSim's drawing of the truth
    (default GSParams, float32 drawing: agreement to 1e-4 of the peak), alone in the cell,
    at the truth's centre."""
    prob, cells, sim = drawn
    p = {k: np.asarray(v, dtype=float) for k, v in sim.params.items()}
    psf = galsim.Moffat(beta=3.5, fwhm=0.9).shear(g1=0.02, g2=-0.01)
    for b in (0, 1):
        for j in range(2):
            gal = galsim.Exponential(half_light_radius=p["hlr"][b, j], flux=p["flux"][b, j])
            gal = gal.shear(g1=p["e1"][b, j], g2=p["e2"][b, j]).shear(g1=G[b][0], g2=G[b][1])
            ref = (
                galsim.Convolve(gal, psf)
                .drawImage(nx=CELL, ny=CELL, scale=0.263, offset=(p["dx"][b, j], p["dy"][b, j]))
                .array
            )
            clean = cells.images[b, j] - _noise(cells, prob, b, j, sim)
            assert np.abs(clean - ref).max() < 1e-4 * ref.max()  # ~1e-3 of the noise
            y, x = cells.centres[b, j]  # the light's centroid is the recorded centre
            yy, xx = np.mgrid[:CELL, :CELL]
            assert abs((ref * xx).sum() / ref.sum() - x) < 0.02
            assert abs((ref * yy).sum() / ref.sum() - y) < 0.02


def _noise(cells, prob, b, j, sim):
    """The cell's noise field: the stamp's inside the window (noisy - clean stamp)."""
    from shearbatch.core.cells import _programs

    noise_p, _ = _programs(prob, CELL)
    import jax.numpy as jnp

    n, _, _ = noise_p(jnp.asarray(SEEDS, jnp.uint32), jnp.asarray(G), jnp.zeros(3, jnp.int32),
                      jnp.zeros(3, jnp.uint32))  # fmt: skip
    return prob.noise_sigma * np.asarray(n[b, j], dtype=float)


def test_pairs_share_noise_and_the_pure_noise_image(drawn):
    """+g/-g of one seed share the cell's noise and the pure-noise image; another seed
    does not; the pure-noise image has the pixel noise's sigma and is not the cell's."""
    prob, cells, _ = drawn
    np.testing.assert_array_equal(cells.noise[0], cells.noise[1])
    assert not np.allclose(cells.noise[0], cells.noise[2])
    assert abs(cells.noise.std() / prob.noise_sigma - 1) < 0.05
    resid = cells.images[0] - cells.images[1]  # the galaxies differ, the noise cancels
    corner = resid[:, :4, :4]
    assert np.abs(corner).max() < 1e-3 * prob.noise_sigma


def test_psf_image_against_galsim(drawn):
    """The PSF image: unit flux, centred on pixel (C//2, C//2) (AnaCal's convention)."""
    cells = drawn[1]
    psf = galsim.Moffat(beta=3.5, fwhm=0.9, gsparams=GS).shear(g1=0.02, g2=-0.01)
    ref = psf.drawImage(nx=CELL, ny=CELL, scale=0.263, offset=(0.5, 0.5), dtype=float).array
    assert np.abs(cells.psf - ref).max() < 1e-5 * ref.max()
    assert np.unravel_index(cells.psf.argmax(), cells.psf.shape) == (CELL // 2, CELL // 2)


def test_a_cell_smaller_than_the_stamp_is_refused(drawn):
    prob = drawn[0]
    with pytest.raises(ValueError, match="smaller than the stamp"):
        simulate_cells(prob, 8, SEEDS[:1], G[:1])
