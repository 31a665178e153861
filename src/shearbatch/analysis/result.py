"""A stage-3 result: the typed content of ``bias_results.json``.

:func:`shearbatch.analysis.bias.measure_bias` builds a :class:`BiasResult`;
``bias-stats`` (:func:`shearbatch.app.run_stats`) writes :meth:`BiasResult.to_json`;
the printed summary, the HTML report and the Python API read its fields. Nothing reads
the file by key; :meth:`BiasResult.from_json` reads it back (a file written before this
record, with the same keys, round-trips to the same text).

The JSON keeps its published layout, top level in this order: ``level``, ``estimator``,
``point_estimate``, ``weights``, ``requirement`` (:class:`Requirement`), the counts
(``n_realizations``, ``n_ok``, ``n_failed``, ``n_incomplete``, ``n_corrupt``, ``n_used``,
``n_seeds``), ``excluded``, per component ``m<k>``, ``m<k>_err``, ``c<k>``, ``c<k>_err``
(and ``m<k>_reason`` when m is undefined), ``fits``, ``design``, ``warnings``,
``population`` (the pooled fits of an interim-model campaign only), ``coverage``, ``sbc``,
``acceptance``, ``z``, ``criteria`` (:class:`Criterion` each), ``prior``, ``noise_bias``,
``verdict``, ``scope``, ``verdict_of_complete`` (an unfinished campaign only), ``passed``
and ``planning``. The sections that are tables of numbers (``fits``, ``design``,
``coverage``, ``sbc``, ``population``, ``prior``, ``noise_bias``, ``scope``,
``planning``) stay mappings; :mod:`shearbatch.analysis.bias` documents them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["COMPONENTS", "BiasResult", "Criterion", "Requirement"]

#: the two shear components, in the order of the file
COMPONENTS = ("g1", "g2")


@dataclasses.dataclass(frozen=True)
class Requirement:
    """The requirement judged: a preset of
    :data:`shearbatch.schema.requirements.REQUIREMENTS`, what it is for, its source, and
    who chose it (``--requirement``, the campaign config, the default)."""

    name: str
    for_: str | None = None
    source: str | None = None
    chosen: str | None = None
    """None until the caller says (``bias-stats`` and the API always do)."""

    def to_json(self) -> dict[str, Any]:
        out = {"name": self.name, "for": self.for_, "source": self.source}
        if self.chosen is not None:
            out["chosen"] = self.chosen
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Requirement:
        return cls(d["name"], d.get("for"), d.get("source"), d.get("chosen"))


@dataclasses.dataclass(frozen=True)
class Criterion:
    """One acceptance criterion, three-valued (:mod:`shearbatch.analysis.verdict`)."""

    name: str
    """``|m1|``, ``|c2|``, ``coverage g1 68%``, ``SBC g2 uniformity p``, ``fraction converged``."""
    value: Any
    threshold: Any
    """A ceiling (m, c), a floor (SBC p, fraction converged) or a ``[low, high]`` band
    (coverage)."""
    status: str
    """``pass``, ``fail`` or ``inconclusive``."""
    err: float | None = None
    z: float | None = None
    n_needed: int | None = None
    """Realizations the criterion needs to be decided (inconclusive ones)."""
    error_method: str | None = None
    reason: str = ""
    quantile: float | None = None
    """The Student-t quantile of an m or c criterion's bound (None for the others)."""
    dof: int | None = None
    detected: bool | None = None
    n_pass_if_zero: int | None = None

    @property
    def passed(self) -> bool:
        return self.status == "pass"

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "value": self.value, "err": self.err,
                "threshold": self.threshold, "z": self.z, "status": self.status,
                "n_needed": self.n_needed, "passed": self.passed,
                "error_method": self.error_method, "reason": self.reason,
                "quantile": self.quantile, "dof": self.dof, "detected": self.detected,
                "n_pass_if_zero": self.n_pass_if_zero}  # fmt: skip

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Criterion:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


@dataclasses.dataclass(frozen=True)
class BiasResult:
    """``bias_results.json`` (see the module docstring)."""

    level: str
    """The requirement's old level alias (``level_0``...) or its name."""
    estimator: str
    """``regression``, ``paired``, ``pooled regression`` or ``pooled paired``."""
    point_estimate: str
    """``mean``, ``median``, ``mode`` or ``population``."""
    weights: str
    requirement: Requirement
    n_realizations: int
    n_ok: int
    n_failed: int
    n_incomplete: int
    n_corrupt: int
    n_used: int
    n_seeds: int
    excluded: dict[str, int]
    """``{why excluded: rows}``."""
    m1: float | None
    """None when undefined (g1_true constant over the campaign): see ``m1_reason``."""
    m1_err: float | None
    """None without an error estimate (fewer than two seeds)."""
    c1: float | None
    c1_err: float | None
    m2: float | None
    m2_err: float | None
    c2: float | None
    c2_err: float | None
    fits: dict[str, Any]
    design: dict[str, Any]
    warnings: dict[str, int]
    coverage: dict[str, Any]
    sbc: dict[str, Any]
    acceptance: dict[str, Any]
    """The criteria's thresholds (the requirement's, with any overrides)."""
    z: float
    criteria: tuple[Criterion, ...]
    prior: dict[str, Any]
    noise_bias: dict[str, Any] | None
    verdict: str
    """``PASS``, ``FAIL`` or ``INCONCLUSIVE`` (always that for an unfinished campaign)."""
    scope: dict[str, Any]
    planning: dict[str, Any]
    population: dict[str, Any] | None = None
    verdict_of_complete: str | None = None
    """An unfinished campaign's verdict on its complete realizations."""
    m1_reason: str | None = None
    """Why m1 is undefined (None when it is defined)."""
    m2_reason: str | None = None
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Keys this version does not know, read back from a file (written last)."""

    @property
    def passed(self) -> bool:
        return self.verdict == "PASS"

    def values(self) -> Iterator[tuple[str, float | None, float | None, str | None]]:
        """``(name, value, error, why undefined)`` of m1, c1, m2, c2, in that order."""
        for k in "12":
            yield (f"m{k}", getattr(self, f"m{k}"), getattr(self, f"m{k}_err"),
                   getattr(self, f"m{k}_reason"))  # fmt: skip
            yield f"c{k}", getattr(self, f"c{k}"), getattr(self, f"c{k}_err"), None

    def criterion(self, name: str) -> Criterion | None:
        return next((c for c in self.criteria if c.name == name), None)

    def replace(self, **changes: Any) -> BiasResult:
        return dataclasses.replace(self, **changes)

    def with_chosen(self, chosen: str) -> BiasResult:
        """The same result, its requirement's ``chosen`` (who picked it) set."""
        return self.replace(requirement=dataclasses.replace(self.requirement, chosen=chosen))

    def to_json(self) -> dict[str, Any]:
        """The ``bias_results.json`` mapping (not yet strict JSON: numpy scalars and NaN
        are turned by :func:`shearbatch.io.to_strict_json`)."""
        out: dict[str, Any] = {
            "level": self.level, "estimator": self.estimator,
            "point_estimate": self.point_estimate, "weights": self.weights,
            "requirement": self.requirement.to_json(),
            "n_realizations": self.n_realizations, "n_ok": self.n_ok,
            "n_failed": self.n_failed, "n_incomplete": self.n_incomplete,
            "n_corrupt": self.n_corrupt, "n_used": self.n_used, "n_seeds": self.n_seeds,
            "excluded": dict(self.excluded),
        }  # fmt: skip
        for k in "12":
            out.update({n: getattr(self, n) for n in (f"m{k}", f"m{k}_err", f"c{k}", f"c{k}_err")})
            if why := getattr(self, f"m{k}_reason"):
                out[f"m{k}_reason"] = why
        out.update(fits=self.fits, design=self.design, warnings=dict(self.warnings))
        if self.population is not None:
            out["population"] = self.population
        out.update(coverage=self.coverage, sbc=self.sbc, acceptance=self.acceptance, z=self.z,
                   criteria=[c.to_json() for c in self.criteria], prior=self.prior,
                   noise_bias=self.noise_bias, verdict=self.verdict, scope=self.scope)  # fmt: skip
        if self.verdict_of_complete is not None:
            out["verdict_of_complete"] = self.verdict_of_complete
        out["passed"] = self.passed
        out["planning"] = self.planning
        out.update(self.extra)
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> BiasResult:
        """Read a ``bias_results.json`` mapping back (``passed`` is recomputed from the
        verdict; unknown keys are kept in :attr:`extra`)."""
        plain = [f.name for f in dataclasses.fields(cls)
                 if f.name not in ("requirement", "criteria", "extra")]  # fmt: skip
        known = {*plain, "requirement", "criteria", "passed"}
        return cls(
            **{k: d.get(k) for k in plain},  # type: ignore[arg-type]
            requirement=Requirement.from_json(d["requirement"]),
            criteria=tuple(Criterion.from_json(c) for c in d.get("criteria", ())),
            extra={k: v for k, v in d.items() if k not in known},
        )
