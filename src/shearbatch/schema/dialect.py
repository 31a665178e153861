"""The SHINE dialect: keys SHINE's own configs set that have no effect here.

SHINE is the system shearbatch replaces, and its YAMLs have the same sections.
A few of their keys mean nothing to this engine (SHINE's MAP is Adam, so its
configs set ``inference.map_config.learning_rate``; here MAP is damped Newton
unless ``optimizer: adam``). Such a key loads with one warning naming it and
saying why it is ignored, and is dropped before validation, so the schema
stays strict: any other unknown key, or a typo, is still an error.

Each rule is one line of :data:`IGNORED`: the key's path and a function of the
raw section holding it, returning why the key has no effect (or ``None`` when
it does have one, and the schema then decides).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

__all__ = ["IGNORED", "IgnoredKey", "drop_ignored"]

logger = logging.getLogger(__name__)


class IgnoredKey(NamedTuple):
    """A SHINE key that loads and is ignored when ``why(section)`` gives a reason."""

    path: tuple[str, ...]
    why: Callable[[Mapping[str, Any]], str | None]


def _map_lr(section: Mapping[str, Any]) -> str | None:
    from ..core.methods import settings_model

    model = settings_model("map_config".removesuffix("_config"))  # the method's own settings
    optimizer = section.get("optimizer", model.model_fields["optimizer"].default)
    if optimizer == "adam":
        return None  # Adam's step size: the schema validates it
    return f"has no effect with optimizer {optimizer} (Adam only; SHINE's MAP is Adam)"


def _map_init_lr(section: Mapping[str, Any]) -> str | None:
    return (
        "NUTS's MAP start uses inference.map_config's optimizer and learning_rate "
        "(SHINE's map_init runs its own Adam)"
    )


def _output_path(section: Mapping[str, Any]) -> str | None:
    return "bias-run writes under campaign.output_dir (--output-dir)"


def _data_path(section: Mapping[str, Any]) -> str | None:
    if section.get("data_path") is None:
        return "null means simulated data, which is what bias-run always runs on"
    return None  # a real path: observed data are not supported, the schema refuses it


#: the SHINE keys that load with a warning (when their rule gives a reason)
IGNORED: tuple[IgnoredKey, ...] = (
    IgnoredKey(("inference", "map_config", "learning_rate"), _map_lr),
    IgnoredKey(("inference", "nuts_config", "map_init", "learning_rate"), _map_init_lr),
    IgnoredKey(("output_path",), _output_path),
    IgnoredKey(("data_path",), _data_path),
)


def drop_ignored(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of the parsed YAML without the SHINE keys that have no effect here, each
    logged once as a warning naming its key path and why it is ignored."""
    out = copy.deepcopy(dict(raw))
    for rule in IGNORED:
        section: Any = out
        for part in rule.path[:-1]:
            section = section.get(part) if isinstance(section, dict) else None
        key = rule.path[-1]
        if not isinstance(section, dict) or key not in section:
            continue
        why = rule.why(section)
        if why is None:
            continue
        del section[key]
        logger.warning("%s: ignored (SHINE key): %s", ".".join(rule.path), why)
    return out
