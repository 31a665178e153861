"""Host estimators: shear estimators that are not JAX methods, run beside the method.

A campaign's ``inference.method`` (MAP, VI, NUTS) is the forward model the device fits;
``inference.estimators`` names host estimators that measure the SAME realizations (the
same galaxies, the same noise, the same seeds and paired / ring designs) on the host, in
worker processes, while the device infers the next batch. Each writes, per realization,
the sums over its galaxies of a shear estimate and its response (``e1``, ``e2``, ``r11``,
``r22``), how many galaxies it measured and flagged, and its CPU cost, into the
realization's ``convergence.json`` (``estimators: {name: {...}}``, under the record's own
checksum); ``bias-extract`` writes them as the columns :func:`columns` and ``bias-stats``
gives each estimator its m, c, verdict and cost, and each one's difference from the
forward model with a seed-jackknife error (:mod:`shearbatch.analysis.compare`).

An estimator is an :class:`Entry` of :data:`REGISTRY`: its settings model (the config
section ``inference.<name>_config``), the module that measures (imported in the worker
processes: NumPy only, no JAX), and the optional package it needs with the line that
says how to install it. Built in: ``anacal`` (AnaCal's FPFS, :mod:`.anacal`).
"""

from __future__ import annotations

import importlib
from typing import Any, NamedTuple

__all__ = ["FIELDS", "REGISTRY", "Entry", "columns", "names", "require", "row_of", "settings_model"]


class Entry(NamedTuple):
    """A host estimator: ``module`` (``"package.module"``) defines ``Settings`` (its
    pydantic model), ``check(settings, problem) -> None`` (``ValueError``, one line, for a
    setting the problem cannot take) and ``measure_batch(...)``; ``package``: the import
    it needs; ``install``: how to install it."""

    module: str
    package: str
    install: str


REGISTRY: dict[str, Entry] = {
    "anacal": Entry("shearbatch.estimators.anacal", "anacal", "pip install 'shearbatch[anacal]'"),
}

#: what each estimator writes per realization (``convergence.json`` and summary.csv's
#: ``<name>_<field>`` columns): sums over the measured galaxies of the estimates and
#: responses, galaxies given and flagged (not finite: left out of the sums), flags (1: a
#: galaxy flagged) and the CPU seconds of the measurement
FIELDS = ("e1", "e2", "r11", "r22", "n", "n_flagged", "flags", "cost_s")


def names() -> tuple[str, ...]:
    return tuple(REGISTRY)


def columns() -> list[str]:
    """summary.csv's estimator columns, ``<name>_<field>`` for every registered one."""
    return [f"{n}_{f}" for n in REGISTRY for f in FIELDS]


def row_of(estimates: Any) -> dict[str, Any]:
    """summary.csv's estimator cells of a realization from its record's ``estimators``
    (``{name: {field: value}}``; anything else: none)."""
    row: dict[str, Any] = {}
    if not isinstance(estimates, dict):
        return row
    for name, rec in estimates.items():
        if name in REGISTRY and isinstance(rec, dict):
            row.update({f"{name}_{f}": rec.get(f) for f in FIELDS})
    return row


def require(name: str) -> None:
    """``ValueError`` (one line saying how to install it) when estimator ``name``'s package
    cannot be imported; unknown names too."""
    if name not in REGISTRY:
        raise ValueError(f"unknown estimator {name!r}; use one of {', '.join(names())}")
    entry = REGISTRY[name]
    try:
        importlib.import_module(entry.package)
    except ImportError:
        raise ValueError(
            f"estimator {name}: {entry.package} is not installed ({entry.install})"
        ) from None


def module(name: str) -> Any:
    return importlib.import_module(REGISTRY[name].module)


def settings_model(name: str) -> type:
    """The settings model of estimator ``name`` (imports no optional package)."""
    return module(name).Settings
