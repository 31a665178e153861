"""One realization's convergence record: the typed content of ``convergence.json``.

``bias-run``'s engine builds a :class:`Convergence` per realization, the writer stores
:meth:`Convergence.to_json`, and ``bias-extract``, the plots, the previews and the resume
read it back with :meth:`Convergence.from_json`. Nothing else reads the file by key.

The JSON keeps its published layout: the common keys (``run_id``, ``status``, ``reason``,
``flags``, ``flag_names``, ``method``, ``point_estimate``, ``mode``, ``thresholds``,
``passed``, ``precision``, ``config_hash``, ``seed``, ``batch_size``, ``snr``,
``chi2_per_pixel``, ``prior``, ``shear_model``, ``batch``, ``runtime_s``, ``checksums``), the gate
statistics (:class:`~shearbatch.core.failure_flags.Gates`: ``rhat``, ``ess_bulk``, ``ess_tail``,
``divergences``, ``divergence_frac``, ``bfmi``), the method's own record (its
``diagnose``'s ``diagnostics``: ``optimizer`` and ``laplace`` for MAP, ``elbo`` for VI,
``rhat_max``, ``step_size``... for NUTS) and the provenance (``config``, ``campaign``,
``versions``, ``device``, ``host``, and ``code``: the git commit, dirty flag and
method-code fingerprint of the code that wrote it, :func:`shearbatch._version.code_version`),
all at the top level.

**The point estimate.** Two names, one meaning each, everywhere (the engine, this record,
``summary.csv``, ``bias_results.json``, the methods' ``Draws``):

- ``mode``: the values of the point each method centres on, ``{site: value}`` (the MAP
  for MAP, the Laplace centre for VI and NUTS; ``g1_mode`` / ``g2_mode`` in
  ``summary.csv``, :attr:`shearbatch.core.methods.Draws.mode`);
- ``point_estimate``: which statistic of the posterior stands for a realization,
  ``"mode"`` (MAP), ``"mean"`` (VI, NUTS) or ``"population"`` (the interim model's
  population fit) (:attr:`shearbatch.core.methods.Method.point_estimate`, the
  ``point_estimate`` column of ``summary.csv`` and key of ``bias_results.json``).

Files written before this record used ``map_estimate`` for ``mode`` and ``estimate`` for
``point_estimate``; :meth:`Convergence.from_json` reads both spellings.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from . import failure_flags as fl

__all__ = ["LEGACY_KEYS", "PROVENANCE_KEYS", "Convergence"]

#: provenance keys (:func:`shearbatch.io.manifest.realization_provenance`)
PROVENANCE_KEYS = ("config", "campaign", "versions", "device", "host", "code")

#: older spellings still read: old key -> current key
LEGACY_KEYS = {"map_estimate": "mode", "estimate": "point_estimate"}

_COMMON = ("run_id", "status", "reason", "flags", "flag_names", "method", "point_estimate",
           "mode", "thresholds", "passed", "precision", "config_hash", "seed", "batch_size",
           "snr", "chi2_per_pixel", "prior", "shear_model", "batch", "runtime_s",
           "checksums")  # fmt: skip


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _float(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return float(v)


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _map(v: Any) -> dict[str, Any]:
    return dict(v) if isinstance(v, Mapping) else {}


@dataclasses.dataclass(frozen=True)
class Convergence:
    """One realization's ``convergence.json`` (see the module docstring)."""

    run_id: str
    status: str
    """``"ok"`` or ``"failed"``."""
    flags: int
    """The flag bits (:mod:`shearbatch.core.failure_flags`)."""
    reason: str | None = None
    """Readable reasons of the flags (None when none is set)."""
    method: str | None = None
    point_estimate: str | None = None
    """Which statistic stands for the realization: ``"mode"``, ``"mean"`` or ``"population"``."""
    mode: dict[str, Any] = dataclasses.field(default_factory=dict)
    """``{site: value}``: the point the method centres on (constrained)."""
    gates: fl.Gates = dataclasses.field(default_factory=fl.Gates)
    """The statistics the threshold gates read."""
    diagnostics: dict[str, Any] = dataclasses.field(default_factory=dict)
    """The method's own record (and, read back, any key this version does not know)."""
    thresholds: dict[str, Any] | None = None
    precision: str | None = None
    config_hash: str | None = None
    seed: int | None = None
    batch_size: int | None = None
    snr: Any = None
    chi2_per_pixel: float | None = None
    prior: dict[str, Any] = dataclasses.field(default_factory=dict)
    shear_model: str | None = None
    """``"interim"`` for the interim model; None (the joint model) when not recorded."""
    batch: dict[str, Any] | None = None
    """The batch's report (index, size, lane, the method's lockstep telemetry)."""
    runtime_s: float | None = None
    provenance: dict[str, Any] = dataclasses.field(default_factory=dict)
    """:data:`PROVENANCE_KEYS`: config, plan settings, versions, device, host, code version."""
    checksums: dict[str, Any] | None = None
    """What the writer recorded to tell damaged files (:mod:`shearbatch.io.integrity`);
    None in a record not yet written, or written before checksums were."""

    @property
    def code(self) -> dict[str, Any]:
        """The code version that wrote it (``commit``, ``dirty``, ``fingerprint``); empty
        in a record from before it was recorded."""
        return _map(self.provenance.get("code"))

    @property
    def flag_names(self) -> list[str]:
        return fl.names(self.flags)

    @property
    def passed(self) -> bool:
        return self.flags == 0

    def flags_under(self, th: fl.Thresholds = fl.DEFAULT_THRESHOLDS) -> int:
        """The flags with the threshold gates re-evaluated against ``th`` (``bias-extract
        --convergence-config``)."""
        return (self.flags & ~fl.THRESHOLD_GATES) | fl.gate_flags(self.gates, th)

    def replace(self, **changes: Any) -> Convergence:
        return dataclasses.replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        """The ``convergence.json`` mapping (not yet strict JSON: see
        :func:`shearbatch.io.writer.to_strict_json`)."""
        out: dict[str, Any] = {
            "run_id": self.run_id,
            "status": self.status,
            "reason": self.reason,
            "flags": self.flags,
            "flag_names": self.flag_names,
            "method": self.method,
            "point_estimate": self.point_estimate,
            "mode": dict(self.mode),
            **self.gates.to_json(),
            **self.diagnostics,
            "thresholds": self.thresholds,
            "passed": self.passed,
            "precision": self.precision,
            "config_hash": self.config_hash,
            "seed": self.seed,
            "batch_size": self.batch_size,
            "snr": self.snr,
            "chi2_per_pixel": self.chi2_per_pixel,
            "prior": dict(self.prior),
        }
        if self.shear_model is not None:
            out["shear_model"] = self.shear_model
        if self.batch is not None:
            out["batch"] = dict(self.batch)
        if self.runtime_s is not None:
            out["runtime_s"] = self.runtime_s
        out.update(self.provenance)
        if self.checksums is not None:
            out["checksums"] = dict(self.checksums)
        return out

    @classmethod
    def from_json(cls, rec: Mapping[str, Any]) -> Convergence:
        """The record of a parsed ``convergence.json``, of this version or an older one
        (:data:`LEGACY_KEYS`). Never raises on a mapping: a value of the wrong type reads
        as unknown (None or empty)."""
        rec = dict(rec)
        for old, new in LEGACY_KEYS.items():
            if old in rec and new not in rec:
                rec[new] = rec[old]
            rec.pop(old, None)
        flags = _int(rec.get("flags"))
        if flags is None:
            names = rec.get("flag_names")
            flags = fl.from_names(names if isinstance(names, list) else [])
        known = {*_COMMON, *fl.GATE_KEYS, *PROVENANCE_KEYS}
        batch = rec.get("batch")
        return cls(
            run_id=str(rec.get("run_id") or ""),
            status=_str(rec.get("status")) or "",
            flags=flags,
            reason=_str(rec.get("reason")),
            method=_str(rec.get("method")),
            point_estimate=_str(rec.get("point_estimate")),
            mode=_map(rec.get("mode")),
            gates=fl.Gates.from_json(rec),
            diagnostics={k: v for k, v in rec.items() if k not in known},
            thresholds=rec.get("thresholds") if isinstance(rec.get("thresholds"), dict) else None,
            precision=_str(rec.get("precision")),
            config_hash=_str(rec.get("config_hash")),
            seed=_int(rec.get("seed")),
            batch_size=_int(rec.get("batch_size")),
            snr=rec.get("snr"),
            chi2_per_pixel=_float(rec.get("chi2_per_pixel")),
            prior=_map(rec.get("prior")),
            shear_model=_str(rec.get("shear_model")),
            batch=dict(batch) if isinstance(batch, Mapping) else None,
            runtime_s=_float(rec.get("runtime_s")),
            provenance={k: rec[k] for k in PROVENANCE_KEYS if k in rec},
            checksums=dict(sums) if isinstance(sums := rec.get("checksums"), Mapping) else None,
        )

    def site(self, group: str, site: str) -> float | None:
        """A scalar per-site statistic: ``group`` is ``"mode"`` or a :class:`Gates` field
        holding one value per site (``"rhat"``, ``"ess_bulk"``, ``"ess_tail"``); None when
        absent or not a number (a per-galaxy list)."""
        d = self.mode if group == "mode" else getattr(self.gates, group)
        v = d.get(site) if isinstance(d, Mapping) else None
        if v is None or isinstance(v, list | dict) or isinstance(v, bool):
            return None
        return float(v)
