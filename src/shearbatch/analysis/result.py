"""A stage-3 result: the typed content of ``bias_results.json``.

:func:`shearbatch.analysis.bias.measure_bias` builds a :class:`BiasResult`;
``bias-stats`` (:func:`shearbatch.app.run_stats`) writes :meth:`BiasResult.to_json`;
the printed summary, the HTML report and the Python API read its fields. Nothing reads
the file by key; :meth:`BiasResult.from_json` reads it back, and a file of any earlier
version (fewer keys, other orders) is written back to the same text.

The JSON keeps its published layout, top level in this order: ``level``, ``estimator``,
``point_estimate``, ``weights``, ``requirement`` (:class:`Requirement`), the counts
(``n_realizations``, ``n_ok``, ``n_failed``, ``n_incomplete``, ``n_corrupt``, ``n_used``,
``n_seeds``), ``excluded``, per component ``m<k>``, ``m<k>_err``, ``c<k>``, ``c<k>_err``
(and ``m<k>_reason`` when m is undefined), ``fits``, ``design``, ``warnings``,
``population`` (the pooled fits of an interim-model campaign only), ``coverage``, ``sbc``,
``acceptance``, ``z``, ``criteria`` (:class:`Criterion` each), ``prior``, ``noise_bias``,
``verdict``, ``scope``, ``verdict_of_complete`` (an unfinished campaign only), ``passed``
and ``planning``. Each section is a record (:class:`Section`): ``fits`` (:class:`Fits`,
a :class:`ComponentFit` per component, its
:class:`ErrorReport`), ``design`` (:class:`Design`), ``coverage``
(:class:`Coverages` of :class:`Coverage`), ``sbc`` (:class:`Sbc` of :class:`SbcTest`),
``population`` (:class:`Population` of :class:`GridPoint`), ``prior`` (:class:`Prior`),
``acceptance`` (:class:`Acceptance`), ``noise_bias`` (:class:`NoiseBias`), ``scope``
(:class:`Scope`), ``planning`` (:class:`Planning` of :class:`PlannedCriterion`) and,
written last when host estimators ran, ``estimators`` (:class:`Estimators` of
:class:`EstimatorResult` and :class:`Difference`); :mod:`shearbatch.analysis.bias` says how
each is computed. A record read from a mapping keeps the mapping's keys and their order,
and any key it does not know, so that it writes the same mapping back.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar, Self

__all__ = [
    "COMPONENTS",
    "Acceptance",
    "BiasResult",
    "ComponentFit",
    "Cost",
    "Coverage",
    "Coverages",
    "Criterion",
    "Design",
    "Difference",
    "ErrorReport",
    "EstimatorResult",
    "Estimators",
    "Fits",
    "GridPoint",
    "NoiseBias",
    "PlannedCriterion",
    "Planning",
    "Population",
    "Prior",
    "Requirement",
    "Sbc",
    "SbcTest",
    "Scope",
    "Section",
]

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
    keys: tuple[str, ...] | None = dataclasses.field(default=None, repr=False, compare=False)
    """The keys of the mapping read back (an earlier version wrote fewer), in its order;
    None: every key."""

    @property
    def passed(self) -> bool:
        return self.status == "pass"

    def to_json(self) -> dict[str, Any]:
        out = {"name": self.name, "value": self.value, "err": self.err,
               "threshold": self.threshold, "z": self.z, "status": self.status,
               "n_needed": self.n_needed, "passed": self.passed,
               "error_method": self.error_method, "reason": self.reason,
               "quantile": self.quantile, "dof": self.dof, "detected": self.detected,
               "n_pass_if_zero": self.n_pass_if_zero}  # fmt: skip
        return out if self.keys is None else {k: out[k] for k in self.keys if k in out}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Criterion:
        names = {f.name for f in dataclasses.fields(cls)} - {"keys"}
        return cls(**{k: v for k, v in d.items() if k in names}, keys=tuple(d))


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
    fits: Fits
    design: Design | None
    """None: a file of a version before the ring design."""
    warnings: dict[str, int] | None
    """``{warning flag: used realizations}``; None: a file of a version without it."""
    coverage: Coverages
    sbc: Sbc
    acceptance: Acceptance
    """The criteria's thresholds (the requirement's, with any overrides)."""
    z: float
    criteria: tuple[Criterion, ...]
    prior: Prior
    noise_bias: NoiseBias | None
    verdict: str
    """``PASS``, ``FAIL`` or ``INCONCLUSIVE`` (always that for an unfinished campaign)."""
    scope: Scope | None
    """None: a file of a version before the campaign's plan was judged."""
    planning: Planning | None
    """None: a file of a version before the planning lines."""
    population: Population | None = None
    verdict_of_complete: str | None = None
    """An unfinished campaign's verdict on its complete realizations."""
    m1_reason: str | None = None
    """Why m1 is undefined (None when it is defined)."""
    m2_reason: str | None = None
    estimators: Estimators | None = None
    """The host estimators beside the method on the same realizations
    (:func:`shearbatch.analysis.compare.compare_estimators`; written last)."""
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Keys this version does not know, read back from a file (written last)."""
    keys: tuple[str, ...] | None = dataclasses.field(default=None, repr=False, compare=False)
    """The top-level keys of the file read back, in its order (earlier versions wrote
    fewer, in other orders), so that it is written back as it was; None: a result built by
    this version, written in the published layout."""

    @classmethod
    def build(cls, **sections: Any) -> BiasResult:
        """A result from its sections (``fits``, ``design``, ``coverage``, ``sbc``,
        ``acceptance``, ``prior``, ``noise_bias``, ``scope``, ``planning``, ``population``,
        ``estimators``): the records the analysis computes, used as they are, or the
        mappings of a file read back (:meth:`from_json`), each read into its record with its
        keys in order."""
        for name, rec in _SECTIONS.items():
            if name in sections:
                sections[name] = rec.maybe(sections[name])
        return cls(**sections)

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
        out.update(fits=_dump(self.fits), design=_dump(self.design),
                   warnings=None if self.warnings is None else dict(self.warnings))  # fmt: skip
        if self.population is not None:
            out["population"] = _dump(self.population)
        out.update(coverage=_dump(self.coverage), sbc=_dump(self.sbc),
                   acceptance=_dump(self.acceptance), z=self.z,
                   criteria=[c.to_json() for c in self.criteria], prior=_dump(self.prior),
                   noise_bias=_dump(self.noise_bias), verdict=self.verdict,
                   scope=_dump(self.scope))  # fmt: skip
        if self.verdict_of_complete is not None:
            out["verdict_of_complete"] = self.verdict_of_complete
        out["passed"] = self.passed
        out["planning"] = _dump(self.planning)
        if self.estimators is not None:
            out["estimators"] = _dump(self.estimators)
        if self.keys is None:
            out.update(self.extra)
            return out
        return {k: self.extra[k] if k in self.extra else out[k] if k in out
                else _dump(getattr(self, k)) for k in self.keys}  # fmt: skip

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> BiasResult:
        """Read a ``bias_results.json`` mapping back (``passed`` is recomputed from the
        verdict; unknown keys are kept in :attr:`extra`; the keys read, in order, in
        :attr:`keys`). A file without ``requirement`` (an earlier version) reads as the
        requirement named by its ``level``."""
        plain = [f.name for f in dataclasses.fields(cls)
                 if f.name not in ("requirement", "criteria", "extra", "keys")]  # fmt: skip
        known = {*plain, "requirement", "criteria", "passed"}
        req = d.get("requirement")
        return cls.build(
            **{k: d.get(k) for k in plain},
            requirement=Requirement(str(d["level"])) if req is None else Requirement.from_json(req),
            criteria=tuple(Criterion.from_json(c) for c in d.get("criteria", ())),
            extra={k: v for k, v in d.items() if k not in known},
            keys=tuple(d),
        )


# ------------------------------------------------------------------- the sections, typed


def _dump(v: Any) -> Any:
    """A field's value as JSON: records (and criteria) by their ``to_json``, inside lists
    and mappings too."""
    if isinstance(v, Section | Criterion):
        return v.to_json()
    if isinstance(v, list | tuple):
        return [_dump(x) for x in v]
    if isinstance(v, dict):
        return {k: _dump(x) for k, x in v.items()}
    return v


@dataclasses.dataclass(frozen=True)
class Section:
    """A section of ``bias_results.json`` as a record: its keys are fields (None when the
    file does not have the key), keys this version does not know are kept in ``extra``, and
    :meth:`from_json` remembers which keys the mapping had and in what order, so
    :meth:`to_json` writes back the same mapping (a file of an earlier version, with fewer
    or other keys, round-trips to the same text). A record built by hand writes every field,
    in the order declared."""

    extra: dict[str, Any] = dataclasses.field(default_factory=dict, kw_only=True)
    """Keys this version does not know, read back from a file."""
    keys: tuple[str, ...] | None = dataclasses.field(default=None, kw_only=True, repr=False,
                                                     compare=False)  # fmt: skip
    """The keys of the mapping read, in its order (None: every field, in declared order)."""

    #: field -> the record (or ``list``/``dict`` of records) its value is read as
    _nested: ClassVar[dict[str, Any]] = {}

    @classmethod
    def _names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls) if f.name not in ("extra", "keys")]

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Self:
        names = set(cls._names())
        kw = {k: _load(cls._nested.get(k), v) for k, v in d.items() if k in names}
        extra = {k: v for k, v in d.items() if k not in names}
        return cls(**kw, extra=extra, keys=tuple(d))

    @classmethod
    def of(cls, **fields: Any) -> Self:
        """A record of exactly these fields, written in the order given (what the analysis
        computed: a section without a key it did not compute, e.g. a skipped test holds
        only ``skipped``). :class:`Fits` keeps its own ``of`` (a component's fit) and is
        built by its constructor."""
        return cls(**fields, keys=tuple(fields))

    def set(self, **changes: Any) -> Self:
        """The record with ``changes``; a field it did not hold is written after the others."""
        keys = self.keys
        if keys is not None:
            keys = (*keys, *(k for k in changes if k not in keys))
        return dataclasses.replace(self, **changes, keys=keys)

    def has(self, key: str) -> bool:
        """Whether the record holds ``key`` (a field it was given, or one read back)."""
        return key in self.extra or (
            key in self._names() and (self.keys is None or key in self.keys)
        )

    @classmethod
    def maybe(cls, d: Mapping[str, Any] | Self | None) -> Self | None:
        """:meth:`from_json`, None for None (a section the file has as null), a record as
        it is."""
        if d is None or isinstance(d, cls):
            return d
        return cls.from_json(d)

    def __getitem__(self, key: str) -> Any:
        """``section[key]``, as when the sections were mappings: deprecated (read the
        field); a :class:`DeprecationWarning`, then the field's value (a record for a
        nested section), or an unknown key's value, else ``KeyError``."""
        import warnings

        warnings.warn(f"{type(self).__name__}[{key!r}]: bias_results.json's sections are "
                      "records since issue 46; read the field instead", DeprecationWarning,
                      stacklevel=2)  # fmt: skip
        if key in self.extra:
            return self.extra[key]
        if key in self._names() and (self.keys is None or key in self.keys):
            return getattr(self, key)
        raise KeyError(key)

    def to_json(self) -> dict[str, Any]:
        order = self.keys if self.keys is not None else (*self._names(), *self.extra)
        out = {k: self.extra[k] if k in self.extra else _dump(getattr(self, k)) for k in order}
        out.update((k, v) for k, v in self.extra.items() if k not in out)
        return out


def _load(kind: Any, v: Any) -> Any:
    """``v`` read as ``kind``: a :class:`Section` (or :class:`Criterion`), ``(list, R)`` a
    list of R, ``(dict, R)`` a mapping of R, None as it is."""
    if kind is None or v is None:
        return v
    if isinstance(kind, tuple):
        box, rec = kind
        if box is list:
            return [_load(rec, x) for x in v]
        return {k: _load(rec, x) for k, x in v.items()}
    return kind.from_json(v)


@dataclasses.dataclass(frozen=True)
class ErrorReport(Section):
    """``fits.<g>.errors``: every error estimate computed for one component's fit
    (:func:`shearbatch.analysis.bias_fits.error_report`)."""

    jackknife: list[float] | float | None = None
    """The jackknife's standard errors of ``(1 + m, c)`` (one number: ``c`` of a
    constant-truth fit); None when not formed."""
    bootstrap: list[float] | float | None = None
    n_boot: int | None = None
    """Finite bootstrap resamples."""
    n_groups: int | None = None
    weights: str | None = None
    weighted: bool | None = None


@dataclasses.dataclass(frozen=True)
class ComponentFit(Section):
    """``fits.g1`` / ``fits.g2``: how m and c of one component were fitted."""

    error_method: str | None = None
    error_label: str | None = None
    """The error method as the summary and the report print it."""
    n: int | None = None
    n_groups: int | None = None
    weights: str | None = None
    errors: ErrorReport | None = None
    """Every error estimate computed (jackknife, bootstrap, ...)."""
    _nested: ClassVar[dict[str, Any]] = {"errors": ErrorReport}


@dataclasses.dataclass(frozen=True)
class Fits(Section):
    """``fits``: the fit of each component."""

    g1: ComponentFit | None = None
    g2: ComponentFit | None = None
    _nested: ClassVar[dict[str, Any]] = {"g1": ComponentFit, "g2": ComponentFit}

    def of(self, comp: str) -> ComponentFit:
        """The fit of ``comp`` (``g1`` or ``g2``)."""
        return {"g1": self.g1, "g2": self.g2}[comp] or ComponentFit()


@dataclasses.dataclass(frozen=True)
class Design(Section):
    """``design``: the campaign's design as the fit sees it."""

    paired: bool | None = None
    rotations: int | None = None
    error_groups: str | None = None
    incomplete_rings_left_out: int | None = None


@dataclasses.dataclass(frozen=True)
class Coverage(Section):
    """``coverage.<g>.<level>``: one interval's coverage
    (:func:`shearbatch.analysis.bias_fits.coverage`), or only ``skipped`` (why not tested)."""

    observed: float | None = None
    expected: float | None = None
    band: list[float] | None = None
    se: float | None = None
    z: float | None = None
    n: int | None = None
    n_eff: int | None = None
    min_seeds: int | None = None
    n_inside: int | None = None
    status: str | None = None
    passed: bool | None = None
    reason: str | None = None
    skipped: str | None = None

    @property
    def tested(self) -> bool:
        return self.observed is not None


@dataclasses.dataclass(frozen=True)
class Coverages(Section):
    """``coverage``: per component, ``{level ("0.68", "0.95"): Coverage}``."""

    g1: dict[str, Coverage] | None = None
    g2: dict[str, Coverage] | None = None
    _nested: ClassVar[dict[str, Any]] = {"g1": (dict, Coverage), "g2": (dict, Coverage)}

    def items(self) -> Iterator[tuple[str, dict[str, Coverage]]]:
        """``(component, {level: Coverage})`` of the components present."""
        for comp in COMPONENTS:
            if (levels := getattr(self, comp)) is not None:
                yield comp, levels


@dataclasses.dataclass(frozen=True)
class SbcTest(Section):
    """``sbc.<g>``: the rank-uniformity test of one component
    (:func:`shearbatch.analysis.bias_fits.sbc`)."""

    n: int | None = None
    n_eff: int | None = None
    min_seeds: int | None = None
    n_bins: int | None = None
    counts: list[int] | None = None
    chi2: float | None = None
    p_value: float | None = None
    ks_statistic: float | None = None
    ks_p_value: float | None = None
    status: str | None = None
    reason: str | None = None
    skipped: str | None = None


@dataclasses.dataclass(frozen=True)
class Sbc(Section):
    """``sbc``: a test per component, or only ``skipped`` (why SBC was not run)."""

    skipped: str | None = None
    g1: SbcTest | None = None
    g2: SbcTest | None = None
    _nested: ClassVar[dict[str, Any]] = {"g1": SbcTest, "g2": SbcTest}

    def items(self) -> Iterator[tuple[str, SbcTest]]:
        """``(component, SbcTest)`` of the components tested."""
        for comp in COMPONENTS:
            if (t := getattr(self, comp)) is not None:
                yield comp, t


@dataclasses.dataclass(frozen=True)
class Acceptance(Section):
    """``acceptance``: the criteria's thresholds, the requirement's with any overrides
    (:data:`shearbatch.schema.requirements.CRITERIA_KEYS`)."""

    max_abs_m: float | None = None
    max_abs_c: float | None = None
    z: float | None = None
    coverage_z: float | None = None
    min_seeds: int | None = None
    min_frac_converged: float | None = None
    sbc_p_min: float | None = None


@dataclasses.dataclass(frozen=True)
class Prior(Section):
    """``prior``: how far the shear prior pulls the estimates."""

    threshold: float | None = None
    shrinkage_g1: float | None = None
    shrinkage_g2: float | None = None
    dominated: bool | None = None


@dataclasses.dataclass(frozen=True)
class NoiseBias(Section):
    """``noise_bias``: the note on the noise bias expected at the campaign's S/N."""

    median_snr: float | None = None
    expected_order: str | float | None = None
    message: str | None = None


@dataclasses.dataclass(frozen=True)
class Scope(Section):
    """``scope``: the rows judged against the plan (:mod:`shearbatch.analysis.scope`)."""

    n_unplanned: int | None = None
    unplanned_dropped: int | None = None
    n_planned: int | None = None
    n_complete: int | None = None
    unfinished: bool | None = None
    message: str | None = None


@dataclasses.dataclass(frozen=True)
class PlannedCriterion(Section):
    """``planning.criteria[]``: the realizations an m or c criterion needs."""

    name: str | None = None
    value: float | None = None
    err: float | None = None
    threshold: float | None = None
    status: str | None = None
    quantile: float | None = None
    detected: bool | None = None
    n_pass_if_zero: int | None = None
    n_confirm_fail: int | None = None
    n_pass_at_estimate: int | None = None


@dataclasses.dataclass(frozen=True)
class Planning(Section):
    """``planning``: the realizations to decide each criterion, from the campaign's own
    scatter (:func:`shearbatch.analysis.verdict.planning`)."""

    design: str | None = None
    paired: bool | None = None
    rotations: int | None = None
    n_used: int | None = None
    n_seeds: int | None = None
    realizations_per_seed: float | None = None
    criteria: list[PlannedCriterion] | None = None
    target_sigma_m: float | None = None
    notes: list[str] | None = None
    lines: list[str] | None = None
    """The printed planning lines."""
    n_for_target: dict[str, Any] | None = None
    _nested: ClassVar[dict[str, Any]] = {"criteria": (list, PlannedCriterion)}


@dataclasses.dataclass(frozen=True)
class GridPoint(Section):
    """``population.grid_points[]``: the pooled fit at one grid point."""

    g1_true: float | None = None
    g2_true: float | None = None
    g1: float | None = None
    g2: float | None = None
    g1_err: float | None = None
    g2_err: float | None = None
    g1_num_err: float | None = None
    g2_num_err: float | None = None
    num_err_m: float | None = None
    decrement: float | None = None
    last_step: float | None = None
    n_steps: int | None = None
    status: str | None = None
    converged: bool | None = None
    flagged: bool | None = None
    n_galaxies: int | None = None
    ess_fraction_min: float | None = None
    n_collapsed: int | None = None
    n_khat_high: int | None = None


@dataclasses.dataclass(frozen=True)
class Population(Section):
    """``population``: the pooled fits of an interim-model campaign
    (:mod:`shearbatch.analysis.pooled`)."""

    grid_points: list[GridPoint] | None = None
    paired: bool | None = None
    n_galaxies: int | None = None
    n_seeds: int | None = None
    num_err_m_max: float | None = None
    n_flagged: int | None = None
    streamed: bool | None = None
    partials: int | None = None
    passes: int | None = None
    _nested: ClassVar[dict[str, Any]] = {"grid_points": (list, GridPoint)}


@dataclasses.dataclass(frozen=True)
class Cost(Section):
    """``estimators.results.<name>.cost``: an estimator's cost per galaxy."""

    what: str | None = None
    """The forward model's device seconds per realization over its galaxies, a host
    estimator's CPU seconds of one worker core."""
    s_per_galaxy: float | None = None
    """NaN (null in the file) without a finite cost."""
    galaxies_per_s: float | None = None


@dataclasses.dataclass(frozen=True)
class EstimatorResult(Section):
    """``estimators.results.<name>``: one estimator's m and c on the shared realizations,
    its criteria, verdict and cost (:mod:`shearbatch.analysis.compare`)."""

    m1: float | None = None
    m1_err: float | None = None
    c1: float | None = None
    c1_err: float | None = None
    m2: float | None = None
    m2_err: float | None = None
    c2: float | None = None
    c2_err: float | None = None
    criteria: list[Criterion] | None = None
    verdict: str | None = None
    cost: Cost | None = None
    n_flagged: int | None = None
    """A host estimator's flagged galaxies (the forward model has none)."""
    _nested: ClassVar[dict[str, Any]] = {"criteria": (list, Criterion), "cost": Cost}


@dataclasses.dataclass(frozen=True)
class Difference(Section):
    """``estimators.differences.<"name - method">``: a host estimator's m and c minus the
    forward model's, jackknifed with the same seeds left out (None: undefined)."""

    dm1: float | None = None
    dm1_err: float | None = None
    dc1: float | None = None
    dc1_err: float | None = None
    dm2: float | None = None
    dm2_err: float | None = None
    dc2: float | None = None
    dc2_err: float | None = None


@dataclasses.dataclass(frozen=True)
class Estimators(Section):
    """``estimators``: the host estimators beside the method on the same realizations
    (:func:`shearbatch.analysis.compare.compare_estimators`)."""

    n_used: int | None = None
    n_seeds: int | None = None
    fit: str | None = None
    forward_model: str | None = None
    point_estimate: str | None = None
    results: dict[str, EstimatorResult] | None = None
    """Per estimator, the forward model first (by its method's name)."""
    differences: dict[str, Difference] | None = None
    """Per host estimator, ``"<name> - <method>"``."""
    _nested: ClassVar[dict[str, Any]] = {"results": (dict, EstimatorResult),
                                         "differences": (dict, Difference)}  # fmt: skip


#: the sections of :class:`BiasResult` that are records, and their types
_SECTIONS: dict[str, type[Section]] = {
    "fits": Fits, "design": Design, "coverage": Coverages, "sbc": Sbc,
    "acceptance": Acceptance, "prior": Prior,
    "noise_bias": NoiseBias, "scope": Scope, "planning": Planning, "population": Population,
    "estimators": Estimators,
}  # fmt: skip
