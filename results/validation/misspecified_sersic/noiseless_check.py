# Noiseless check of the sersic2 campaign: least-squares fit of the JAX exponential (Moffat PSF)
# to GalSim Sersic images of the prior-mean galaxy (hlr 0.5", flux 1) sheared by +-0.02.
# Output (run from the repository root with PYTHONPATH=src), 2026-11-23:
#   n=1.0: noiseless best-fit exponential: m1 = -0.0000, hlr = 0.5000, flux = 1.0000
#   n=2.0: noiseless best-fit exponential: m1 = -0.0929, hlr = 0.4710, flux = 0.9112
import jax, numpy as np, galsim, scipy.optimize as so
jax.config.update("jax_enable_x64", True)
from shearbatch.render import draw_galaxy
G = galsim.GSParams(folding_threshold=1e-7, maxk_threshold=1e-10, kvalue_accuracy=1e-12)
psf = galsim.Moffat(beta=3.5, fwhm=0.8, gsparams=G)
def data(n, g):
    gal = galsim.Sersic(n=n, half_light_radius=0.5, flux=1.0, gsparams=G).shear(g1=g, g2=0)
    return galsim.Convolve(gal, psf, gsparams=G).drawImage(nx=32, ny=32, scale=0.263).array
f = jax.jit(lambda p: draw_galaxy(flux=p[0], half_light_radius=p[1], g1=p[2], g2=p[3], offset=p[4:6],
            psf_profile="moffat", psf_fwhm=0.8, psf_beta=3.5, nx=32, ny=32, scale=0.263))
jac = jax.jit(jax.jacfwd(lambda p: f(p).ravel()))
for n in (1.0, 2.0):
    est = {}
    for g in (0.02, -0.02):
        d = data(n, g).ravel()
        r = so.least_squares(lambda p: np.asarray(f(p)).ravel() - d, [1, 0.5, 0, 0, 0, 0], jac=lambda p: np.asarray(jac(p)), xtol=1e-14, ftol=1e-14)
        est[g] = r.x
    m = (est[0.02][2] - est[-0.02][2]) / 0.04 - 1
    print(f"n={n}: noiseless best-fit exponential: m1 = {m:+.4f}, hlr = {est[0.02][1]:.4f}, flux = {est[0.02][0]:.4f}")
