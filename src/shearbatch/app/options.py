"""What a ``bias-run`` is asked to do: :class:`RunOptions`, and the flags merged into the config.

The options are ``bias-run``'s flags with underscores (``shear_grid=(-0.05, 0.05)`` is
``--shear-grid -0.05 0.05``); the CLI and :func:`shearbatch.run` both build one. Flags that
set a config key (``--batch-size`` -> ``campaign.batch_size``) are merged into the config's
DATA and the merged mapping is validated by the schema, so every rule on a key has one home
(schema/); an error on a key a flag set is reported under that flag's name.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "CAMPAIGN_FLAGS",
    "SBATCH_FLAGS",
    "PlanError",
    "RunOptions",
    "apply_flags",
    "config_with_flags",
    "flag_name",
    "overrides",
]


class PlanError(ValueError):
    """Bad input to a run, found before any computation: ``str(err)`` is one line naming
    the flag (or config key) at fault. ``bias-run`` exits 2 with it."""


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """``bias-run``'s options (``None``: not given, the config's value or the default)."""

    #: YAML path, or a mapping with the same content (the Python API)
    config: str | Path | Mapping[str, Any] | None = None
    g1_true: float | None = None
    g2_true: float | None = None
    seed: int | None = None
    run_id: str | None = None
    shear_grid: tuple[float, ...] = ()
    shear_grid_g2: tuple[float, ...] = ()
    n_realizations: int | None = None
    base_seed: int | None = None
    paired: bool | None = None
    rotations: int | None = None
    shear_from_prior: bool | None = None
    batch_size: int | None = None
    output_dir: str | None = None
    method: str | None = None
    x64: bool | None = None
    array_task_id: int | None = None
    array_task_count: int | None = None
    array_indices: str | None = None
    overwrite: bool = False
    lane_chunk: str | int = "auto"
    overlap: bool = True
    cache_dir: str | None = None
    time_limit: str | None = None
    dry_run: bool = False
    preview: str | None = None
    progress: bool | None = None
    emit_sbatch: str | None = None
    sbatch_tasks: int | None = None
    sbatch_array: str | None = None
    sbatch_throttle: int | None = None
    sbatch_time: str | None = None
    sbatch_mem: str | None = None
    sbatch_cpus: int | None = None
    sbatch_gpus: int | None = None
    sbatch_line: tuple[str, ...] = ()
    sbatch_setup: tuple[str, ...] = ()
    sbatch_stats: bool | None = None
    sbatch_level: str | None = None

    @classmethod
    def fields(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))


#: bias-run flag -> campaign key it overrides (the one place flags meet the config)
CAMPAIGN_FLAGS = {
    "n_realizations": "n_realizations",
    "base_seed": "base_seed",
    "batch_size": "batch_size",
    "output_dir": "output_dir",
    "paired": "paired",
    "rotations": "rotations",
    "g2_true": "g2",
}

#: --sbatch-<key> flag -> campaign.sbatch key it overrides
SBATCH_FLAGS = {f"sbatch_{k}": k for k in ("tasks", "array", "throttle", "time", "mem", "cpus",
                                           "gpus", "line", "setup", "stats", "level")}  # fmt: skip


def flag_name(option: str) -> str:
    """``batch_size`` -> ``--batch-size``."""
    return "--" + option.replace("_", "-")


def _get(kw: Any, name: str) -> Any:
    return kw.get(name) if isinstance(kw, Mapping) else getattr(kw, name, None)


def overrides(kw: RunOptions | Mapping[str, Any]) -> dict[str, tuple[str, Any]]:
    """Dotted config key -> (option that sets it, value), for every given flag.

    A flag that is given (not ``None``) wins over the config's ``campaign`` /
    ``inference`` keys; a flag that is absent leaves the config's value.
    ``--shear-grid`` / ``--shear-grid-g2`` replace the grid's g1 / g2 values (and
    turn SBC off); ``--g2-true`` without ``--shear-grid-g2`` makes g2 constant;
    ``--shear-from-prior`` turns SBC on.
    """
    out: dict[str, tuple[str, Any]] = {}
    for f, k in CAMPAIGN_FLAGS.items():
        if _get(kw, f) is not None:
            out[f"campaign.{k}"] = (f, _get(kw, f))
    if _get(kw, "shear_grid"):
        out["campaign.shear_grid"] = ("shear_grid", list(_get(kw, "shear_grid")))
        out["campaign.shear_from_prior"] = ("shear_grid", False)
    if _get(kw, "shear_grid_g2"):
        out["campaign.shear_grid_g2"] = ("shear_grid_g2", list(_get(kw, "shear_grid_g2")))
        out["campaign.shear_from_prior"] = ("shear_grid_g2", False)
    elif _get(kw, "g2_true") is not None:
        # a constant g2 given here beats the config's g2 grid
        out["campaign.shear_grid_g2"] = ("g2_true", None)
    if _get(kw, "shear_from_prior"):
        out["campaign.shear_from_prior"] = ("shear_from_prior", True)
    if _get(kw, "method") is not None:
        out["inference.method"] = ("method", str(_get(kw, "method")).lower())
    if _get(kw, "x64") is not None:
        out["inference.precision"] = ("x64", "float64" if _get(kw, "x64") else "float32")
    for f, k in SBATCH_FLAGS.items():
        if _get(kw, f) not in (None, ()):
            v = _get(kw, f)
            out[f"campaign.sbatch.{k}"] = (f, list(v) if isinstance(v, tuple) else v)
    return out


def _merged(data: Mapping[str, Any], over: Mapping[str, tuple[str, Any]]) -> dict[str, Any]:
    """``data`` (a config mapping) with each dotted key of ``over`` set to its value."""
    out = copy.deepcopy(dict(data))
    for key, (_, value) in over.items():
        *parents, last = key.split(".")
        node = out
        for p in parents:
            if node.get(p) is None:
                node[p] = {}
            node = node[p]
            if not isinstance(node, dict):
                break  # not a mapping: the schema names the section
        else:
            node[last] = value
    return out


def _flag_error(msg: str, over: Mapping[str, tuple[str, Any]]) -> str:
    """The schema's one-line message, under the flag's name when a flag set the key (and
    with the other keys of its section that flags set named by their flags)."""
    import re

    path, sep, rest = msg.partition(": ")
    if not sep:
        return msg
    section_rule = False
    if path not in over:  # a section-level rule ("campaign: rotations: ...") names its key
        key, sep2, tail = rest.partition(": ")
        if sep2 and re.fullmatch(r"\w+", key):
            section_rule = True
            mentioned = [k for k in over if k.startswith(f"{path}.")
                         and re.search(rf"\b{k.rsplit('.', 1)[1]}\b", tail)]  # fmt: skip
            if f"{path}.{key}" in over:
                path, rest = f"{path}.{key}", tail
            elif mentioned:
                path, rest = mentioned[0], f"{tail} ({path}.{key} in the config)"
    parts = path.split(".")
    for i in range(len(parts) - 1, 1, -1):  # an item of a list a flag gave (shear_grid.0)
        if path not in over and ".".join(parts[:i]) in over:
            path, rest = ".".join(parts[:i]), f"item {'.'.join(parts[i:])}: {rest}"
    if path not in over:
        return msg
    option, value = over[path]
    rest = rest.replace("Input should be ", "must be ", 1)
    section = path.rsplit(".", 1)[0]
    for k, (opt, _) in over.items():
        name = k.rsplit(".", 1)[1]
        if k.rsplit(".", 1)[0] == section and "_" in name:
            rest = re.sub(rf"(?<![\w.-]){name}(?![\w-])", flag_name(opt), rest)
    if (
        not section_rule
        and value is not None
        and not any(t in rest for t in ("got", "(+", str(value)))
    ):
        rest += f", got {value}"
    return f"{flag_name(option)}: {rest}"


def config_with_flags(data: Mapping[str, Any], kw: RunOptions | Mapping[str, Any]) -> Any:
    """Validate ``data`` (a config mapping), then ``data`` with the given flags merged in:
    raises :class:`~shearbatch.schema.ConfigError` naming the config key (a bad value in
    the file is refused even where a flag would override it), or :class:`PlanError` naming
    the flag, in one line."""
    from ..schema import ConfigError, parse_config
    from ..schema.dialect import drop_ignored

    if isinstance(data, dict):  # SHINE keys without effect: dropped once, one warning each
        data = drop_ignored(data)
    parse_config(dict(data))  # the file alone first: its own errors name its keys
    over = overrides(kw)
    try:
        return parse_config(_merged(data, over))
    except ConfigError as err:
        msg = _flag_error(str(err), over)
        if msg != str(err):
            raise PlanError(msg) from None
        raise


def apply_flags(cfg: Any, kw: RunOptions | Mapping[str, Any]) -> Any:
    """The validated config ``cfg`` with every given ``bias-run`` flag applied over it
    (see :func:`overrides`), validated again by the schema."""
    return config_with_flags(cfg.model_dump(mode="json"), kw)
