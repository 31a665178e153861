"""The strict settings model shared by the config schema and the inference methods.

:class:`StrictModel` is the base of every section of the config schema
(:mod:`shearbatch.schema`) and of each inference method's own settings model (the
``inference.<method>_config`` section, defined next to the method in
:mod:`shearbatch.core.methods`): unknown keys are errors, values are frozen, defaults
are validated, and the docstring under each field is its description in the generated
config reference (``docs/config.md``; a leading ``[unit]`` is its unit).
:data:`Positive` and :data:`Count` are the constrained numbers they use. This module
imports only pydantic, so a method module can define its settings without importing
the schema (which builds its ``inference`` section from the method registry).
"""

from __future__ import annotations

import math
from typing import Annotated, Any, get_args

from pydantic import AfterValidator, BaseModel, ConfigDict, model_validator

__all__ = ["Count", "Positive", "StrictModel"]


class StrictModel(BaseModel):
    # the docstring under each field is its description in docs/config.md; a leading
    # ``[unit]`` is its unit (python -m shearbatch.schema.reference writes the file)
    model_config = ConfigDict(
        extra="forbid", frozen=True, validate_default=True, use_attribute_docstrings=True
    )

    @model_validator(mode="before")
    @classmethod
    def _no_bool_numbers(cls, data: Any) -> Any:
        """YAML ``true``/``false`` is not a number (pydantic would read ``size_x: true`` as 1)."""
        if not isinstance(data, dict):
            return data
        out = dict(data)
        for k, v in data.items():
            field = cls.model_fields.get(k) if isinstance(k, str) else None
            if isinstance(v, bool) and field is not None:
                ann = field.annotation
                if ann is not bool and bool not in get_args(ann) and ann is not Any:
                    out[k] = _YamlBool(v)  # fails the field's own type check, under its key
        return out


class _YamlBool:
    """A YAML boolean where a number belongs (its repr is the YAML spelling)."""

    def __init__(self, v: bool) -> None:
        self.v = v

    def __repr__(self) -> str:
        return str(self.v).lower()


def _positive(v: float) -> float:
    if not (v > 0 and math.isfinite(v)):
        raise ValueError("must be > 0")
    return v


def _at_least_one(v: int) -> int:
    if v < 1:
        raise ValueError("must be >= 1")
    return v


Positive = Annotated[float, AfterValidator(_positive)]  # finite and > 0
Count = Annotated[int, AfterValidator(_at_least_one)]  # an integer >= 1
