"""The config reference (``docs/config.md``), generated from the schema itself.

Every key's type, allowed values and default come from the pydantic models; its
unit, description and example from the docstring under the field (``[arcsec]
Pixel size. Example: 0.263``). Regenerate with::

    python -m shearbatch.schema.reference > docs/config.md

``tests/schema/test_config_reference.py`` fails when the file is stale or a key has no
description.
"""

from __future__ import annotations

import re
import sys
import types
import typing
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from .config import Config, current_config
from .dialect import IGNORED
from .distributions import DIST_TYPES, Fixed, LogNormal, Normal, TruncatedNormal, Uniform

__all__ = ["describe", "reference_markdown", "undocumented"]

_DISTS = (Fixed, Normal, LogNormal, Uniform, TruncatedNormal)


def describe(description: str | None) -> tuple[str, str, str]:
    """``(unit, text, example)`` of a field docstring ``[unit] text. Example: value``."""
    text = " ".join((description or "").split())
    unit = ""
    m = re.match(r"^\[([^\]]*)\]\s*(.*)$", text)
    if m:
        unit, text = m.group(1), m.group(2)
    example = ""
    m = re.search(r"\s*Example:\s*(.*)$", text)
    if m:
        example, text = m.group(1), text[: m.start()]
    return unit, text, example


def _field_type(field: Any) -> str:
    """Type and allowed values of a model field (pydantic keeps top-level constraints aside)."""
    if field.discriminator == "type":
        return "number or distribution"
    if field.metadata:
        return _type_name(typing.Annotated[(field.annotation, *field.metadata)])
    return _type_name(field.annotation)


def _type_name(ann: Any) -> str:
    meta = getattr(ann, "__metadata__", ())
    base = get_args(ann)[0] if meta else ann
    for m in meta:
        fn = getattr(m, "func", None)
        if getattr(fn, "__name__", "") == "_positive":
            return "number > 0"
        if getattr(fn, "__name__", "") == "_at_least_one":
            return "integer >= 1"
        if getattr(m, "discriminator", None) == "type":
            return "number or distribution"
    origin = get_origin(base)
    if origin is Literal:
        return "one of " + ", ".join(f"`{a}`" for a in get_args(base))
    if origin in (typing.Union, types.UnionType):
        args = [a for a in get_args(base) if a is not type(None)]
        names = " or ".join(_type_name(a) for a in args)
        return f"{names} or null" if len(args) < len(get_args(base)) else names
    if origin is list:
        return f"list of {_type_name(get_args(base)[0])}"
    if origin is dict:
        return "mapping"
    if isinstance(base, type) and issubclass(base, BaseModel):
        return "section"
    return {float: "number", int: "integer", bool: "true / false", str: "string"}.get(
        base, str(base)
    )


def _default(field: Any) -> str:
    if field.default is PydanticUndefined and field.default_factory is None:
        return "**required**"
    value = field.get_default(call_default_factory=True)
    if isinstance(value, Fixed):
        return f"`{value.value:g}`"
    if isinstance(value, BaseModel):
        return "(section)"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value}`"


def _section_models(ann: Any) -> list[type[BaseModel]]:
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return [ann] if ann not in _DISTS else []
    return [m for a in get_args(ann) for m in _section_models(a)]


def _sections(model: type[BaseModel], path: str) -> list[tuple[str, type[BaseModel]]]:
    out = [(path, model)]
    for name, field in model.model_fields.items():
        for sub in _section_models(field.annotation):
            out += _sections(sub, f"{path}.{name}" if path else name)
    return out


def _table(model: type[BaseModel]) -> list[str]:
    rows = ["| key | type / allowed values | unit | default | description | example |",
            "|---|---|---|---|---|---|"]  # fmt: skip
    for name, field in model.model_fields.items():
        unit, text, example = describe(field.description)
        cells = [f"`{name}`", _field_type(field), unit, _default(field), text,
                 f"`{example}`" if example else ""]  # fmt: skip
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return rows


def undocumented() -> list[str]:
    """Keys whose field has no docstring (the reference would have no description)."""
    missing = []
    for path, model in [*_sections(current_config(), ""), *((d.__name__, d) for d in _DISTS)]:
        for name, field in model.model_fields.items():
            if not (field.description or "").strip():
                missing.append(f"{path}.{name}" if path else name)
    return missing


def reference_markdown() -> str:
    """The whole ``docs/config.md``."""
    lines = [
        "# Config reference",
        "",
        "<!-- generated from the schema by `python -m shearbatch.schema.reference > "
        "docs/config.md`; do not edit: edit the docstrings in src/shearbatch/schema/ and, for "
        "a method's inference.<method>_config, in its module under "
        "src/shearbatch/core/methods/ -->",
        "",
        "Every key of a `bias-run --config` YAML file. Unknown keys are errors (with a "
        "did-you-mean); `bias-run --show-config CONFIG` prints a config with every default "
        "filled in. Flags of `bias-run` override the `campaign` and `inference` keys they name. "
        "Annotated examples: `configs/level0.yaml` (noise-free Level 0), "
        "`configs/survey_snr30.yaml` (survey S/N with free nuisance latents).",
        "",
        "**Numbers or priors.** A galaxy parameter (`gal.flux`, `gal.half_light_radius`, "
        "`gal.ellipticity.e1/e2`, `gal.shear.g1/g2`) is *fixed* when it is a number and a "
        "*latent* (drawn as the truth, inferred with the same prior) when it is a mapping with "
        f"`type` ({', '.join(DIST_TYPES)}); see [Distributions](#distributions).",
        "",
        "**Units.** Angles in arcsec, positions and sizes of the stamp in pixels, fluxes in "
        "image units (a noiseless stamp's pixels sum to its flux), shears and ellipticities "
        "dimensionless.",
        "",
    ]
    for path, model in _sections(current_config(), ""):
        title = f"`{path}`" if path else "Top level"
        lines += [f"## {title}", ""]
        doc = " ".join((model.__doc__ or "").split()) if model is not Config else ""
        doc = doc.replace(":class:", "")
        if doc and not doc.startswith(model.__name__ + "("):
            lines += [doc, ""]
        lines += [*_table(model), ""]
    lines += ["## Distributions", "",
              "A prior is a mapping with `type`; a bare number is `Fixed`. Example: "
              "`half_light_radius: {type: LogNormal, mean: 0.5, sigma: 0.1}`.", ""]  # fmt: skip
    for d in _DISTS:
        lines += [f"### `{d.__name__}`", "", *_table(d), ""]
    lines += ["## SHINE keys that load and are ignored", "",
              "Keys of SHINE's own configs that have no effect here load with one warning "
              "each, naming the key and why, and are ignored (`shearbatch.schema.dialect`); "
              "any other unknown key is an error.", "",
              "| key | why it has no effect |", "|---|---|"]  # fmt: skip
    for rule in IGNORED:
        lines.append(f"| `{'.'.join(rule.path)}` | {rule.why({})} |")
    return "\n".join(lines).rstrip() + "\n"


if __name__ == "__main__":  # pragma: no cover - exercised by the staleness test's command
    sys.stdout.write(reference_markdown())
