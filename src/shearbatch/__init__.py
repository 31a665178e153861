"""shearbatch: batched Bayesian inference for weak-lensing shear-bias campaigns.

A campaign simulates galaxy images with a known shear ``g_true``, infers the
shear back by forward modelling, and fits ``g_hat = (1 + m) g_true + c``.

Notebook API (imported on first use, so ``import shearbatch`` stays light):
:func:`run` (``bias-run`` from Python) and :func:`open_campaign` (statuses,
summary table, m and c, per-realization posteriors); see :mod:`shearbatch.api`.
"""

from typing import Any

from ._version import __version__

__all__ = ["Campaign", "__version__", "open_campaign", "run"]


def __getattr__(name: str) -> Any:
    if name in ("Campaign", "open_campaign", "run"):
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'shearbatch' has no attribute {name!r}")
