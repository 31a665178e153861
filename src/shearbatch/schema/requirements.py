"""Acceptance requirements by name: the one table of ``bias-stats --requirement`` presets.

A requirement is the ceilings on ``|m|`` and ``|c|`` (per component) that a campaign is
judged against, with the settings of the other criteria (coverage band, seeds to test
coverage and SBC, fraction converged, SBC p-value floor). :data:`REQUIREMENTS` holds every
preset: one matched to each shipped config (``configs/<name>.yaml`` names it under
``campaign.requirement``) and science requirements taken from published documents, each
with its source. ``level_0`` / ``level_1`` / ``level_2`` (the old ``--level`` names) are
aliases (:data:`ALIASES`). ``docs/requirements.md`` is generated from this table
(:func:`requirements_markdown`; ``python -m shearbatch.schema.requirements``).

How a ceiling on a *systematic uncertainty* becomes a ceiling on ``|m|``: a calibration
campaign measures the residual bias of the shear estimator; a survey that does not
correct it carries all of it as systematic error, so a requirement "the uncertainty on m
shall not exceed T" is judged here as ``|m| + q sigma <= T`` (PASS) and ``|m| - q sigma >
T`` (FAIL), the rule of :mod:`shearbatch.analysis.verdict`.

Plain data, no heavy imports: the config schema validates ``campaign.requirement``
against these names.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = [
    "ALIASES",
    "CRITERIA_KEYS",
    "REQUIREMENTS",
    "criteria_of",
    "names",
    "requirements_markdown",
    "resolve",
]

#: the settings every preset gives (bias-stats' criteria; --acceptance-config overrides them)
CRITERIA_KEYS = ("max_abs_m", "max_abs_c", "z", "coverage_z", "min_seeds",
                 "min_frac_converged", "sbc_p_min")  # fmt: skip

_COMMON = {"z": 2.0, "coverage_z": 3.0, "min_seeds": 20, "sbc_p_min": 0.01}

#: name -> {criteria (CRITERIA_KEYS), "for": what it is matched to, "source": where the
#: ceilings come from}
REQUIREMENTS: dict[str, dict[str, Any]] = {
    "level0": {
        **_COMMON, "max_abs_m": 1e-3, "max_abs_c": 1e-4, "min_frac_converged": 0.99,
        "for": "configs/level0.yaml (one fixed round galaxy, S/N 1.2e5)",
        "source": "this project's Level 0 target: the LSST project's numbers (lsst-project) "
                  "reached on a noise-free galaxy, where nothing but the pipeline can bias m",
    },
    "level1": {
        **_COMMON, "max_abs_m": 2e-3, "max_abs_c": 2e-4, "min_frac_converged": 0.95,
        "for": "configs/level1.yaml (8 galaxies per shear, S/N ~200-1000, NUTS)",
        "source": "this project's Level 1 target (twice the Level 0 ceilings)",
    },
    "level2": {
        **_COMMON, "max_abs_m": 5e-3, "max_abs_c": 5e-4, "min_frac_converged": 0.90,
        "for": "configs/level2.yaml (32 galaxies per shear at survey S/N, paired + rings)",
        "source": "this project's Level 2 target (five times the Level 0 ceilings)",
    },
    "survey_snr15": {
        **_COMMON, "max_abs_m": 5e-3, "max_abs_c": 5e-4, "min_frac_converged": 0.90,
        "for": "configs/survey_snr15.yaml (one galaxy, free nuisances, S/N 15, paired)",
        "source": "the Level 2 ceilings, against which docs/validation.md ('Noise bias and "
                  "planning') judges the survey-S/N configs; a science requirement is one "
                  "of lsst-project, desc-srd-y10, euclid",
    },
    "survey_snr30": {
        **_COMMON, "max_abs_m": 5e-3, "max_abs_c": 5e-4, "min_frac_converged": 0.90,
        "for": "configs/survey_snr30.yaml (one galaxy, free nuisances, S/N 30, paired)",
        "source": "as survey_snr15",
    },
    "survey_snr100": {
        **_COMMON, "max_abs_m": 5e-3, "max_abs_c": 5e-4, "min_frac_converged": 0.90,
        "for": "configs/survey_snr100.yaml (one galaxy, free nuisances, S/N 100, paired)",
        "source": "as survey_snr15",
    },
    "lsst-project": {
        **_COMMON, "max_abs_m": 1e-3, "max_abs_c": 1e-4, "min_frac_converged": 0.95,
        "for": "science: the Rubin Observatory LSST project's shape-measurement requirement",
        "source": "Rubin Observatory LSST project requirement on shape measurement (change "
                  "approved by the LSST CCB, announced by J. Bosch, "
                  "https://community.lsst.org/t/updated-requirements-for-shape-measurement/"
                  "3417): recovery of constant applied shears between 0.01 and 0.05 from an "
                  "ensemble of isolated galaxies with a multiplicative bias below 0.001 and "
                  "additive biases below 0.0001",
    },
    "desc-srd-y10": {
        **_COMMON, "max_abs_m": 3e-3, "max_abs_c": 1e-4, "min_frac_converged": 0.95,
        "for": "science: the LSST DESC ten-year (Y10) weak-lensing analysis",
        "source": "LSST DESC Science Requirements Document v1 (Mandelbaum et al. 2018, "
                  "arXiv:1809.01669), weak-lensing requirement for Y10: systematic "
                  "uncertainty of the redshift-dependent multiplicative shear calibration "
                  "at most 0.003 (the full-depth number quoted as 'the LSST full-depth "
                  "requirement of 0.003' in e.g. github.com/sowmyakth/measure_cg_bias); only "
                  "that multiplicative number is taken from the SRD here, |c| < 1e-4 is "
                  "lsst-project's",
    },
    "euclid": {
        **_COMMON, "max_abs_m": 2e-3, "max_abs_c": 5e-4, "min_frac_converged": 0.95,
        "for": "science: a Euclid-like stage-IV survey (the |m| < 2e-3 variant)",
        "source": "Euclid shear-measurement requirements R-SHE-CAL-F-070 (error on the "
                  "multiplicative bias below 2e-3, 1 sigma) and R-SHE-CAL-F-080 (additive "
                  "bias known to better than 5e-4), as quoted in the Euclid SHE validation "
                  "documentation",
    },
}  # fmt: skip

#: the old --level names (and configs/acceptance.yaml's keys) -> preset
ALIASES = {"level_0": "level0", "level_1": "level1", "level_2": "level2"}


def names() -> list[str]:
    """Every preset name, then the aliases."""
    return [*REQUIREMENTS, *ALIASES]


def resolve(name: str) -> str:
    """The preset a name (or alias) means; ``ValueError`` naming the choices otherwise."""
    if name in REQUIREMENTS:
        return name
    if name in ALIASES:
        return ALIASES[name]
    raise ValueError(f"unknown requirement {name!r}; use one of {', '.join(REQUIREMENTS)} "
                     f"(or the aliases {', '.join(ALIASES)})")  # fmt: skip


def alias_of(name: str) -> str | None:
    """The old ``level_k`` name of a preset, if it has one."""
    return next((a for a, p in ALIASES.items() if p == name), None)


def criteria_of(name: str) -> dict[str, float]:
    """The criteria settings (:data:`CRITERIA_KEYS`) of a preset or alias."""
    req = REQUIREMENTS[resolve(name)]
    return {k: (int(req[k]) if k == "min_seeds" else float(req[k])) for k in CRITERIA_KEYS}


def requirements_markdown() -> str:
    """``docs/requirements.md``: the table of presets with their sources."""
    lines = [
        "# Requirements",
        "",
        "<!-- generated by `python -m shearbatch.schema.requirements`; do not edit -->",
        "",
        "`bias-stats --requirement NAME` judges a campaign against one of these presets; a "
        "config names its own under `campaign.requirement`, and `bias-stats` uses that one "
        "when no `--requirement` is given (it prints which, and from where). `--level "
        "level_0 | level_1 | level_2` is an alias of `level0 | level1 | level2`. Each "
        "criterion PASSes when |x| + q·σ ≤ ceiling and FAILs when |x| − q·σ > ceiling "
        "([Statistics and the verdict](statistics.md)); `--acceptance-config` overrides any "
        "setting. All presets use z = 2, coverage_z = 3, min_seeds = 20, sbc_p_min = 0.01.",
        "",
        "| name | \\|m\\| < | \\|c\\| < | fraction converged ≥ | for |",
        "|---|---|---|---|---|",
    ]
    for name, r in REQUIREMENTS.items():
        alias = alias_of(name)
        shown = f"`{name}`" + (f" (`{alias}`)" if alias else "")
        what = r["for"].replace("|", "\\|")  # a pipe would end the table cell
        lines.append(f"| {shown} | {r['max_abs_m']:g} | {r['max_abs_c']:g} | "
                     f"{r['min_frac_converged']:g} | {what} |")  # fmt: skip
    lines += ["", "## Sources", ""]
    lines += [f"- `{name}`: {r['source']}." for name, r in REQUIREMENTS.items()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # pragma: no cover
    sys.stdout.write(requirements_markdown())
