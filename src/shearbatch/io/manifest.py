"""The campaign manifest: ``<output-root>/campaign.json``, written once, and what it protects.

The first ``bias-run`` into an output root writes ``campaign.json`` (the full
config, its hash, the plan - shear grid, seeds, design, planned run ids -, the
method, batch size, dtype, the versions of shearbatch, JAX, jaxlib, NumPyro and
ArviZ, the code version - git commit, dirty flag, method-code fingerprint:
:func:`shearbatch._version.code_version` -, the device kind and count, and
``record_format``: what its realizations' records carry, which tells a campaign written
before checksums existed, :mod:`.integrity`). It is written to a temporary file, fsynced and
*linked* into place (``os.link`` fails if the name exists: :mod:`.atomic`'s
``exclusive`` write), so when several array tasks start together exactly one
manifest wins and nobody sees a partial one; the others read it and compare.

*Campaign-defining* settings must agree between the manifest and every later
run into the same root: the config (:data:`DEFINING`: config hash, method,
dtype) and the plan (:data:`PLAN_DEFINING`: the design, both components of the
shear grid, the constant g2, the base seed, pairs, rotations and their noise,
the renderer's period). A run that differs is refused (``bias-run`` exits 2
naming the setting, before anything is computed) unless ``--overwrite``
replaces the manifest. ``n_realizations`` may grow: the plan with more seeds
holds the old one, so the manifest (and the frozen config) is rewritten with
the larger plan and the run resumes; a run with fewer computes part of the
plan. Batch size and device may differ; each ``convergence.json`` records its
own (:func:`realization_provenance`), which is also everything needed to
reproduce that realization alone.

Next to the manifest, ``<output-root>/config.yaml`` (:data:`FROZEN_CONFIG`) is the
config as run: the data the schema validated, after the flags and ``--set``
overrides (recorded in the manifest's ``overrides``). It is written with the
manifest (or by ``bias-run --emit-sbatch``, before the array starts); SLURM tasks
and later stages read it instead of the user's file.

``realization_status(..., expect=defining(...))`` of :mod:`.layout` uses the
same three settings, so a resume never counts as complete a realization
computed with other campaign-defining settings.
"""

from __future__ import annotations

import json
import logging
import os
import socket
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from .._version import __version__, code_version
from . import atomic, integrity
from .layout import MANIFEST
from .writer import to_strict_json

__all__ = [
    "DEFINING",
    "FROZEN_CONFIG",
    "MANIFEST",
    "PLAN_DEFINING",
    "ManifestMismatch",
    "check_identity",
    "check_manifest",
    "defining",
    "environment",
    "first_difference",
    "identity",
    "mismatch",
    "read_frozen_config",
    "read_manifest",
    "write_frozen_config",
    "write_manifest",
]

logger = logging.getLogger(__name__)

#: the config as run, next to the manifest
FROZEN_CONFIG = "config.yaml"
#: campaign-defining settings: (key in the manifest and in convergence.json, what the user changes)
#: (the config hash covers the whole config but campaign, method and precision included, so
#: those two are compared first to name what differs)
DEFINING = {
    "method": "--method / inference.method",
    "precision": "--x64/--no-x64 / inference.precision (dtype)",
    "config_hash": "--config (config hash)",
}
#: plan-defining settings (keys of the manifest's ``plan``; what the user changes). Absent
#: keys agree (a manifest written before a key was recorded). ``n_realizations`` is not one:
#: a campaign may grow.
PLAN_DEFINING = {
    "design": "design (--g1-true single / --shear-grid grid / --shear-from-prior prior)",
    "shear_grid": "--shear-grid / campaign.shear_grid",
    "shear_grid_g2": "--shear-grid-g2 / campaign.shear_grid_g2",
    "g2": "--g2-true / campaign.g2",
    "base_seed": "--base-seed / campaign.base_seed",
    "paired": "--paired/--no-paired / campaign.paired",
    "rotations": "--rotations / campaign.rotations",
    "rotation_noise": "campaign.rotation_noise",
    "fft_size": "image.fft_size (the renderer's period)",
    "alias_band": "image.alias_band (the renderer's alias band)",
}
_PACKAGES = ("shearbatch", "jax", "jaxlib", "numpyro", "arviz")


class ManifestMismatch(ValueError):
    """A run's campaign-defining settings differ from the output root's ``campaign.json``."""


def defining(config_hash: str, method: str, precision: str) -> dict[str, str]:
    return {"method": method, "precision": precision, "config_hash": config_hash}


def _version(pkg: str) -> str | None:
    if pkg == "shearbatch":
        return __version__
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return None


def environment() -> dict[str, Any]:
    """Package versions, the code version (:func:`~shearbatch._version.code_version`),
    device kind and count, host (call after JAX is configured)."""
    import jax

    devs = jax.devices()
    return {
        "versions": {p: _version(p) for p in _PACKAGES},
        "code": code_version(),
        "device": {"platform": devs[0].platform, "kind": devs[0].device_kind, "count": len(devs)},
        "host": socket.gethostname(),
    }


def realization_provenance(
    *, config: Mapping[str, Any], campaign: Mapping[str, Any], env: Mapping[str, Any]
) -> dict[str, Any]:
    """What each ``convergence.json`` records to be reproducible on its own (with its seed and
    batch size, which the engine adds): config, plan settings, versions, code version,
    device."""
    return {"config": dict(config), "campaign": dict(campaign), **env}


def _read_text(path: Path) -> str | None:
    """The text of a campaign-root file, ``None`` when absent; ``ValueError`` (one line)
    when it exists but cannot be read."""
    try:
        return path.read_text()
    except FileNotFoundError:
        return None
    except OSError as err:
        raise ValueError(f"{path}: cannot read: {err.strerror}") from None


def read_manifest(root: str | Path) -> dict[str, Any] | None:
    """The manifest of ``root``, ``None`` when absent; ``ValueError`` when unreadable."""
    path = Path(root) / MANIFEST
    text = _read_text(path)
    if text is None:
        return None
    try:
        doc = json.loads(text)
    except ValueError as err:
        raise ValueError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("plan"), dict):
        raise ValueError(f"{path}: not a shearbatch campaign manifest")
    return doc


def mismatch(found: Mapping[str, Any], expect: Mapping[str, Any]) -> str | None:
    """The first campaign-defining key whose recorded value differs (absent keys agree)."""
    for key in DEFINING:
        if found.get(key) is not None and expect.get(key) is not None:
            if found[key] != expect[key]:
                return key
    return None


def identity(doc: Mapping[str, Any]) -> dict[str, Any]:
    """A manifest's campaign-defining settings: :data:`DEFINING` (top level) and
    :data:`PLAN_DEFINING` (its ``plan``), only those it records."""
    plan = doc.get("plan") or {}
    out = {k: doc[k] for k in DEFINING if k in doc}
    out.update({k: plan[k] for k in PLAN_DEFINING if k in plan})
    return out


def _defining_plan(plan: Mapping[str, Any]) -> dict[str, Any]:
    """The :data:`PLAN_DEFINING` keys of a plan that matter for it: g2 only on a g1-only
    grid, the rotations' noise only with rotations, and of a single realization
    (``--g1-true``) only its design (single realizations of one config share a root)."""
    out = {k: v for k, v in plan.items() if k in PLAN_DEFINING}
    if out.get("design") == "single":
        return {k: v for k, v in out.items() if k in ("design", "fft_size", "alias_band")}
    if out.get("shear_grid_g2") is not None or out.get("design") == "prior":
        out.pop("g2", None)
    if out.get("rotations") in (None, 1):
        out.pop("rotation_noise", None)
    return out


def _show(v: Any) -> str:
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_show(x) for x in v) + "]"
    return "null" if v is None else str(v)


def first_difference(a: Any, b: Any, path: str = "") -> tuple[str, Any, Any] | None:
    """The first (dotted key, value in ``a``, value in ``b``) where two JSON-like
    configs (model dumps) differ (a key absent on one side counts as null; a fixed
    parameter is its number; mappings of different ``type`` differ as a whole), None
    when equal."""
    fixed = [isinstance(x, Mapping) and x.get("type") == "Fixed" for x in (a, b)]
    if any(fixed):  # a fixed parameter is written as its number
        a, b = (x["value"] if f else x for x, f in zip((a, b), fixed, strict=True))
    if isinstance(a, Mapping) and isinstance(b, Mapping) and a.get("type") == b.get("type"):
        for k in sorted(set(a) | set(b), key=str):
            d = first_difference(a.get(k), b.get(k), f"{path}.{k}" if path else str(k))
            if d is not None:
                return d
        return None
    return None if a == b else (path, a, b)


def check_identity(
    found: Mapping[str, Any],
    expect: Mapping[str, Any],
    where: str | Path,
    *,
    found_config: Mapping[str, Any] | None = None,
    config: Mapping[str, Any] | None = None,
) -> None:
    """Raise :class:`ManifestMismatch` naming the first campaign-defining setting of
    ``expect`` (this run) that differs from ``found`` (the campaign in ``where``); keys
    absent on either side agree. With both configs given, a different config hash names
    the first config key that differs."""
    names = {**DEFINING, **PLAN_DEFINING}
    found = {**_defining_plan(found), **{k: v for k, v in found.items() if k in DEFINING}}
    expect = {**_defining_plan(expect), **{k: v for k, v in expect.items() if k in DEFINING}}
    for key, name in names.items():
        if key not in found or key not in expect:
            continue
        if key in DEFINING and (found[key] is None or expect[key] is None):
            continue
        if found[key] == expect[key]:
            continue
        what = f"{_show(expect[key])} differs from {_show(found[key])}"
        if key == "config_hash" and found_config is not None and config is not None:
            strip = ("campaign",)
            d = first_difference({k: v for k, v in config.items() if k not in strip},
                                 {k: v for k, v in found_config.items() if k not in strip})  # fmt: skip
            if d is not None:
                what = f"{d[0]} is {_show(d[1])} here, {_show(d[2])}"
        raise ManifestMismatch(
            f"{name}: {what} in {where} (another campaign); use another --output-dir, "
            "or --overwrite to replace that campaign"
        )


def check_manifest(
    root: str | Path,
    expect: Mapping[str, Any],
    plan: Mapping[str, Any] | None = None,
    config: Mapping[str, Any] | None = None,
) -> dict[str, Any] | None:
    """The existing manifest, after checking it against ``expect`` (:func:`defining`)
    and the run's ``plan`` (:data:`PLAN_DEFINING` keys; ``config``: the run's config,
    to name the key behind a different config hash).

    Raises :class:`ManifestMismatch` naming the first differing setting, or
    ``ValueError`` for an unreadable manifest.
    """
    doc = read_manifest(root)
    if doc is None:
        return None
    run = {**{k: v for k, v in (plan or {}).items() if k in PLAN_DEFINING}, **expect}
    check_identity(identity(doc), run, Path(root) / MANIFEST, found_config=doc.get("config"),
                   config=config)  # fmt: skip
    return doc


def write_manifest(
    root: str | Path,
    *,
    config: Mapping[str, Any],
    expect: Mapping[str, Any],
    plan: Mapping[str, Any],
    run_ids: Sequence[str],
    batch_size: int,
    env: Mapping[str, Any],
    replace: bool = False,
    overrides: Sequence[Mapping[str, Any]] = (),
    frozen: Mapping[str, Any] | None = None,
) -> tuple[dict[str, Any], bool]:
    """Write ``campaign.json`` once (``replace``: atomically over an existing one), and with
    it ``frozen`` (the config data as run) as :data:`FROZEN_CONFIG`.

    Returns ``(manifest in force, written by this call)``. When another task
    wrote it first, that one is returned after :func:`check_manifest`; when that one
    plans fewer realizations per grid point (``plan["n_realizations"]``) this call's
    larger plan replaces it (the campaign grows; ``extended`` records when; its
    ``created_at`` and ``record_format``, or its absence, are kept).
    """
    root = Path(root)
    doc = {
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        integrity.FORMAT_KEY: integrity.RECORD_FORMAT,
        **expect,
        "config": dict(config),
        "overrides": [dict(o) for o in overrides],
        "plan": {**plan, "n_planned": len(run_ids), "run_ids": list(run_ids)},
        "batch_size": batch_size,
        **env,
        "pid": os.getpid(),
    }
    root.mkdir(parents=True, exist_ok=True)
    path = root / MANIFEST
    atomic.remove_orphans(root, (MANIFEST, FROZEN_CONFIG))  # also when the manifest is kept
    if not replace:
        found = check_manifest(root, expect, plan, config)
        if found is not None:
            old_n, new_n = found["plan"].get("n_realizations"), plan.get("n_realizations")
            if not (isinstance(old_n, int) and isinstance(new_n, int) and new_n > old_n):
                if frozen is not None and not (root / FROZEN_CONFIG).is_file():
                    write_frozen_config(root, frozen)  # a campaign from before config.yaml
                return found, False
            doc["created_at"] = found.get("created_at", doc["created_at"])
            # what its first realizations carry: a campaign from before checksums stays one
            if integrity.FORMAT_KEY in found:
                doc[integrity.FORMAT_KEY] = found[integrity.FORMAT_KEY]
            else:
                del doc[integrity.FORMAT_KEY]
            doc["extended"] = [*(found.get("extended") or []),
                               {"at": datetime.now(UTC).isoformat(timespec="seconds"),
                                "n_realizations": [old_n, new_n]}]  # fmt: skip
            logger.info("campaign grows from %d to %d realization(s) per grid point: %s "
                        "rewritten with the larger plan", old_n, new_n, path)  # fmt: skip
            replace = True
    text = json.dumps(to_strict_json(doc), indent=1, allow_nan=False) + "\n"
    if replace:
        if frozen is not None:
            write_frozen_config(root, frozen)
        atomic.write_text(path, text, parent=False)
        return doc, True
    try:  # created whole where absent: exactly one of several starting tasks wins
        atomic.write_text(path, text, parent=False, exclusive=True)
    except FileExistsError:
        found = check_manifest(root, expect, plan, config)
        assert found is not None
        return found, False
    if frozen is not None:
        write_frozen_config(root, frozen)
    return doc, True


def write_frozen_config(root: str | Path, data: Mapping[str, Any]) -> Path:
    """Write :data:`FROZEN_CONFIG` (the config data as run) atomically under ``root``."""
    import yaml

    text = (
        "# The config as run: the file with bias-run's --set items and flags applied (listed\n"
        f"# in {MANIFEST}'s overrides). SLURM tasks and later stages read this copy, not\n"
        "# the original file.\n" + yaml.safe_dump(to_strict_json(dict(data)), sort_keys=False)
    )
    return atomic.write_text(Path(root) / FROZEN_CONFIG, text, parent=False)


def read_frozen_config(root: str | Path) -> Any:
    """The frozen config data of the campaign under ``root`` (not validated), or None
    when it has none; ``ValueError`` when it cannot be read."""
    import yaml

    path = Path(root) / FROZEN_CONFIG
    text = _read_text(path)
    if text is None:
        return None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ValueError(f"{path}: not valid YAML ({type(err).__name__})") from None
