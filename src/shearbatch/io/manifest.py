"""The campaign manifest: ``<output-root>/campaign.json``, written once, and what it protects.

The first ``bias-run`` into an output root writes ``campaign.json`` (the full
config, its hash, the plan - shear grid, seeds, design, planned run ids -, the
method, batch size, dtype, the versions of shearbatch, JAX, jaxlib, NumPyro and
ArviZ, the device kind and count). It is written to a temporary file and
*linked* into place (``os.link`` fails if the name exists), so when several
array tasks start together exactly one manifest wins and nobody sees a partial
one; the others read it and compare.

*Campaign-defining* settings (:data:`DEFINING`: config hash, method, dtype)
must agree between the manifest and every later run into the same root: a run
that differs is refused (``bias-run`` exits 2 naming the setting) unless
``--overwrite`` replaces the manifest. Batch size and device may differ; each
``convergence.json`` records its own (:func:`realization_provenance`), which is
also everything needed to reproduce that realization alone.

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

from .._version import __version__
from .writer import to_strict_json

__all__ = [
    "DEFINING",
    "MANIFEST",
    "ManifestMismatch",
    "check_manifest",
    "defining",
    "environment",
    "mismatch",
    "read_manifest",
    "write_manifest",
]

logger = logging.getLogger(__name__)

MANIFEST = "campaign.json"
#: campaign-defining settings: (key in the manifest and in convergence.json, what the user changes)
#: (the config hash covers the whole config but campaign, method and precision included, so
#: those two are compared first to name what differs)
DEFINING = {
    "method": "--method / inference.method",
    "precision": "--x64/--no-x64 / inference.precision (dtype)",
    "config_hash": "--config (config hash)",
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
    """Package versions, device kind and count, host (call after JAX is configured)."""
    import jax

    devs = jax.devices()
    return {
        "versions": {p: _version(p) for p in _PACKAGES},
        "device": {"platform": devs[0].platform, "kind": devs[0].device_kind, "count": len(devs)},
        "host": socket.gethostname(),
    }


def realization_provenance(
    *, config: Mapping[str, Any], campaign: Mapping[str, Any], env: Mapping[str, Any]
) -> dict[str, Any]:
    """What each ``convergence.json`` records to be reproducible on its own (with its seed and
    batch size, which the engine adds): config, plan settings, versions, device."""
    return {"config": dict(config), "campaign": dict(campaign), **env}


def read_manifest(root: str | Path) -> dict[str, Any] | None:
    """The manifest of ``root``, ``None`` when absent; ``ValueError`` when unreadable."""
    path = Path(root) / MANIFEST
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as err:
        raise ValueError(f"{path}: cannot read: {err.strerror}") from None
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


def check_manifest(root: str | Path, expect: Mapping[str, Any]) -> dict[str, Any] | None:
    """The existing manifest, after checking it against ``expect`` (:func:`defining`).

    Raises :class:`ManifestMismatch` naming the first differing setting, or
    ``ValueError`` for an unreadable manifest.
    """
    doc = read_manifest(root)
    if doc is None:
        return None
    key = mismatch(doc, expect)
    if key is not None:
        raise ManifestMismatch(
            f"{DEFINING[key]}: {expect[key]} differs from {doc[key]} in "
            f"{Path(root) / MANIFEST} (another campaign); use another --output-dir, "
            "or --overwrite to replace that campaign"
        )
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
) -> tuple[dict[str, Any], bool]:
    """Write ``campaign.json`` once (``replace``: atomically over an existing one).

    Returns ``(manifest in force, written by this call)``. When another task
    wrote it first, that one is returned after :func:`check_manifest`.
    """
    root = Path(root)
    doc = {
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        **expect,
        "config": dict(config),
        "plan": {**plan, "n_planned": len(run_ids), "run_ids": list(run_ids)},
        "batch_size": batch_size,
        **env,
        "pid": os.getpid(),
    }
    root.mkdir(parents=True, exist_ok=True)
    path = root / MANIFEST
    host = socket.gethostname()
    _remove_orphans(root, host)
    # created with mode 0666 so that the user's umask decides who may read it
    tmp = root / f".{MANIFEST}.{host}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(to_strict_json(doc), fh, indent=1, allow_nan=False)
            fh.write("\n")
        if replace:
            os.replace(tmp, path)
            return doc, True
        try:
            os.link(tmp, path)  # atomic create-if-absent: exactly one task wins
        except FileExistsError:
            found = check_manifest(root, expect)
            assert found is not None
            return found, False
        return doc, True
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _remove_orphans(root: Path, host: str) -> None:
    """Remove temporary manifests left by killed processes of this host (pid no longer alive)."""
    for p in root.glob(f".{MANIFEST}.{host}.*.tmp"):
        try:
            pid = int(p.name[len(f".{MANIFEST}.{host}.") : -len(".tmp")])
            os.kill(pid, 0)
        except ProcessLookupError:
            p.unlink(missing_ok=True)
        except (ValueError, PermissionError):
            continue


def plan_differences(manifest: Mapping[str, Any], plan: Mapping[str, Any]) -> list[str]:
    """Plan settings (grid, seeds, design) of this run that differ from the manifest's."""
    have = manifest.get("plan") or {}
    return [k for k, v in plan.items() if k in have and have[k] != v]
