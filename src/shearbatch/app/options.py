"""What a ``bias-run`` is asked to do: :class:`RunOptions`, and the flags merged into the config.

The options are ``bias-run``'s flags with underscores (``shear_grid=(-0.05, 0.05)`` is
``--shear-grid -0.05 0.05``), grouped by concern (:class:`ConfigOverrides`,
:class:`ExecutionOptions`, :class:`SlurmOptions`); the CLI and :func:`shearbatch.run` both
build one with :meth:`RunOptions.of`. Each is checked in one place: a flag that sets a
config key by the schema, the others by :func:`shearbatch.app.plan.plan_run`. Flags that
set a config key (``--batch-size`` -> ``campaign.batch_size``) are merged into the config's
DATA and the merged mapping is validated by the schema, so every rule on a key has one home
(schema/); an error on a key a flag set is reported under that flag's name.

``--set key.path=value`` (``set_values``, repeatable; GalSim's ``galsim cfg.yaml
image.noise.snr=15`` convention) sets any config key: the value is parsed as YAML (a
number, ``null``, a word, ``[0.01, 0.02]``), applied to the file's data before the flags
and the schema; a key the schema does not know, or a value it refuses, is one line
naming ``--set <key>``. :func:`merge_config` returns the validated config together with
the data it was validated from (frozen as ``<output-dir>/config.yaml``) and the
overrides applied (recorded in ``campaign.json``).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..schema import Config

__all__ = [
    "CAMPAIGN_FLAGS",
    "SBATCH_FLAGS",
    "ConfigOverrides",
    "ExecutionOptions",
    "PlanError",
    "RunOptions",
    "SlurmOptions",
    "apply_flags",
    "config_with_flags",
    "flag_name",
    "merge_config",
    "overrides",
    "parse_sets",
]


class PlanError(ValueError):
    """Bad input to a run, found before any computation: ``str(err)`` is one line naming
    the flag (or config key) at fault. ``bias-run`` exits 2 with it."""


@dataclasses.dataclass(frozen=True)
class ConfigOverrides:
    """The options that say what is run: the config, and the flags that set its keys or
    choose the realizations (``None``: not given, the config's value)."""

    #: YAML path, or a mapping with the same content (the Python API)
    config: str | Path | Mapping[str, Any] | None = None
    #: ``--set key.path=value`` items (applied before the flags)
    set_values: tuple[str, ...] = ()
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
    #: lanes per batch, or ``"auto"`` (the most that fit the memory budget)
    batch_size: int | str | None = None
    output_dir: str | None = None
    method: str | None = None
    #: host estimators beside the method, comma-separated (``inference.estimators``)
    estimators: str | None = None
    x64: bool | None = None


@dataclasses.dataclass(frozen=True)
class ExecutionOptions:
    """The options that say how this process runs it (never the results beyond the last
    bit): its array task, the device memory, the writes, the cache, time, what to print."""

    #: device memory one batch may use (``"2GiB"``; None: the device's free memory)
    memory_budget: str | None = None
    lane_chunk: str | int = "auto"
    overlap: bool = True
    cache_dir: str | None = None
    time_limit: str | None = None
    array_task_id: int | None = None
    array_task_count: int | None = None
    array_indices: str | None = None
    overwrite: bool = False
    dry_run: bool = False
    #: ``--pilot``: the dry run also compiles and times one batch
    pilot: bool = False
    preview: str | None = None
    progress: bool | None = None


@dataclasses.dataclass(frozen=True)
class SlurmOptions:
    """The options of ``--emit-sbatch``: the script, and the ``--sbatch-*`` flags (each
    overrides its ``campaign.sbatch`` key: :data:`SBATCH_FLAGS`)."""

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


#: the groups of :class:`RunOptions`, by concern: its field -> the record
_GROUPS: dict[str, type] = {"overrides": ConfigOverrides, "execution": ExecutionOptions,
                            "slurm": SlurmOptions}  # fmt: skip


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """``bias-run``'s options, split by concern: :attr:`overrides` (the config and the flags
    that override it), :attr:`execution` (how this process runs) and :attr:`slurm`
    (``--emit-sbatch``). :meth:`of` makes one from the flags' names with underscores, as the
    CLI and :func:`shearbatch.run` have them."""

    overrides: ConfigOverrides = dataclasses.field(default_factory=ConfigOverrides)
    execution: ExecutionOptions = dataclasses.field(default_factory=ExecutionOptions)
    slurm: SlurmOptions = dataclasses.field(default_factory=SlurmOptions)

    @classmethod
    def fields(cls) -> tuple[str, ...]:
        """Every option's name (``bias-run``'s flags with underscores), over the groups."""
        return tuple(f.name for g in _GROUPS.values() for f in dataclasses.fields(g))

    @classmethod
    def of(cls, **options: Any) -> RunOptions:
        """The options named as the flags are (``shear_grid=(0.01,)``, ``overlap=False``,
        ``sbatch_tasks=4``), each put in its group; ``TypeError`` for an unknown name."""
        groups: dict[str, dict[str, Any]] = {g: {} for g in _GROUPS}
        where = {f.name: g for g, rec in _GROUPS.items() for f in dataclasses.fields(rec)}
        for k, v in options.items():
            if k not in where:
                raise TypeError(f"RunOptions: unknown option {k!r}")
            groups[where[k]][k] = v
        return cls(**{g: rec(**groups[g]) for g, rec in _GROUPS.items()})

    def get(self, name: str) -> Any:
        """The option ``name`` (its flag with underscores), whichever group holds it."""
        for group in (self.overrides, self.execution, self.slurm):
            if hasattr(group, name):
                return getattr(group, name)
        raise AttributeError(name)


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
    return kw.get(name) if isinstance(kw, Mapping | RunOptions) else getattr(kw, name, None)


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
        if f == "batch_size" and _get(kw, f) == "auto":
            continue  # chosen by the engine from the memory budget: not a config value
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
    if _get(kw, "estimators") is not None:
        names = [e.strip().lower() for e in str(_get(kw, "estimators")).split(",") if e.strip()]
        out["inference.estimators"] = ("estimators", [e for e in names if e != "none"] or None)
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


def _check_key(key: str, raw: str) -> None:
    """One line naming ``--set key`` when the schema has no such key (walking the models
    while it can: a free-form mapping such as ``simulation.gal`` accepts any key)."""
    import difflib

    from ..schema import current_config
    from ..schema.config import known_keys

    parts = key.split(".")
    for i, part in enumerate(parts):
        keys = known_keys(current_config(), parts[:i])
        if keys is None:
            return
        if part not in keys:
            close = difflib.get_close_matches(part, keys, n=1, cutoff=0.6)
            hint = f"did you mean {close[0]}?" if close else f"known: {', '.join(keys)}"
            where = ".".join(parts[: i + 1])
            raise PlanError(f"--set {raw}: unknown key {where} ({hint})")


def parse_sets(items: str | Sequence[str]) -> dict[str, tuple[str, Any]]:
    """``--set`` items -> {dotted key: (the item as given, value parsed as YAML)}; raises
    :class:`PlanError` (one line naming the item) for a malformed item, a value that is
    not YAML, a key the schema does not know or a key given twice."""
    import yaml

    out: dict[str, tuple[str, Any]] = {}
    for raw in (items,) if isinstance(items, str) else tuple(items):
        key, eq, text = str(raw).partition("=")
        key = key.strip()
        if not eq or not key or any(not p for p in key.split(".")):
            raise PlanError(f"--set: expected KEY.PATH=VALUE (e.g. image.noise.snr=15), "
                            f"got {raw!r}")  # fmt: skip
        try:
            value = yaml.safe_load(text) if text.strip() else None
        except yaml.YAMLError as err:
            raise PlanError(f"--set {raw}: the value is not YAML "
                            f"({getattr(err, 'problem', None) or type(err).__name__})") from None  # fmt: skip
        if isinstance(value, dict):
            raise PlanError(f"--set {raw}: give one key per --set (a scalar or a list), "
                            "not a mapping")  # fmt: skip
        _check_key(key, raw)
        if key in out:
            raise PlanError(f"--set {raw}: {key} is also set by --set {out[key][0]}")
        clash = [k for k in out if k.startswith(f"{key}.") or key.startswith(f"{k}.")]
        if clash:
            raise PlanError(f"--set {raw}: overlaps --set {out[clash[0]][0]}")
        out[key] = (str(raw), value)
    return out


def _set_error(msg: str, sets: Mapping[str, tuple[str, Any]]) -> str:
    """The schema's one-line message under ``--set <item>`` when it is about a key that
    ``--set`` gave (or one inside it), with the item named when it is about its section."""
    path, sep, rest = msg.partition(": ")
    if not sep:
        return msg
    for key, (raw, _) in sets.items():
        if path == key or path.startswith(f"{key}."):
            rest = rest.replace("Input should be ", "must be ", 1)
            where = "" if path == key else f"{path}: "
            return f"--set {raw}: {where}{rest}"
    for key, (raw, _) in sets.items():
        if key.startswith(f"{path}."):
            return f"{msg} (--set {raw})"
    return msg


def _apply_sets(data: Mapping[str, Any], sets: Mapping[str, tuple[str, Any]]) -> dict[str, Any]:
    """``data`` with each ``--set`` key set (missing sections created); a key under a
    value that is not a mapping is one line naming the item."""
    out = copy.deepcopy(dict(data))
    for key, (raw, value) in sets.items():
        *parents, last = key.split(".")
        node = out
        for i, p in enumerate(parents):
            if node.get(p) is None:
                node[p] = {}
            node = node[p]
            if not isinstance(node, dict):
                where = ".".join(parents[: i + 1])
                raise PlanError(f"--set {raw}: {where} is {node!r} in the config, not a "
                                "mapping")  # fmt: skip
        node[last] = copy.deepcopy(value)
    return out


def merge_config(
    data: Mapping[str, Any], kw: RunOptions | Mapping[str, Any]
) -> tuple[Config, dict[str, Any], list[dict[str, Any]]]:
    """``(config, data as validated, overrides)``: ``data`` (a config mapping) validated
    alone, then with ``kw``'s ``--set`` items and flags merged in (in that order) and
    validated again. Raises :class:`~shearbatch.schema.ConfigError` naming the config key
    (a bad value in the file is refused even where a flag would override it), or
    :class:`PlanError` naming the ``--set`` item or the flag, in one line. ``overrides``:
    one ``{"key", "value", "source"}`` per key set by ``--set`` or a flag."""
    from ..schema import ConfigError, parse_config
    from ..schema.dialect import drop_ignored

    if isinstance(data, dict):  # SHINE keys without effect: dropped once, one warning each
        data = drop_ignored(data)
    parse_config(dict(data))  # the file alone first: its own errors name its keys
    sets = parse_sets(_get(kw, "set_values") or ())
    over = overrides(kw)
    for key, (raw, _) in sets.items():
        if key in over:
            raise PlanError(f"--set {raw}: {key} is also set by {flag_name(over[key][0])}; "
                            "give one of them")  # fmt: skip
    merged = _merged(_apply_sets(data, sets), over)
    try:
        cfg = parse_config(copy.deepcopy(merged))
    except ConfigError as err:
        msg = _set_error(str(err), sets)
        if msg == str(err):
            msg = _flag_error(str(err), over)
        if msg != str(err):
            raise PlanError(msg) from None
        raise
    record = [{"key": k, "value": v, "source": f"--set {raw}"} for k, (raw, v) in sets.items()]
    record += [{"key": k, "value": v, "source": flag_name(opt)} for k, (opt, v) in over.items()]
    return cfg, merged, record


def config_with_flags(data: Mapping[str, Any], kw: RunOptions | Mapping[str, Any]) -> Any:
    """Validate ``data`` (a config mapping), then ``data`` with the given ``--set`` items
    and flags merged in (:func:`merge_config`): the validated config."""
    return merge_config(data, kw)[0]


def apply_flags(cfg: Any, kw: RunOptions | Mapping[str, Any]) -> Any:
    """The validated config ``cfg`` with every given ``bias-run`` flag applied over it
    (see :func:`overrides`), validated again by the schema."""
    return config_with_flags(cfg.model_dump(mode="json"), kw)
