"""shearbatch: batched Bayesian inference for weak-lensing shear-bias campaigns.

A campaign simulates galaxy images with a known shear ``g_true``, infers the
shear back by forward modelling, and fits ``g_hat = (1 + m) g_true + c``.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("shearbatch")
except PackageNotFoundError:  # pragma: no cover - source tree without install
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
