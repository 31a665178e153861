"""The report's stamps (data, model at the estimate, residual of a few realizations),
rendered by the forward model in a process of its own.

``bias-stats`` loads no JAX and nothing of the engine (issue 57): a stats node, or a
laptop reading an archived campaign, needs neither. The model stamps are the one thing
stage 3 shows that stage 1's files do not hold, so :func:`stamps_png` starts
``python -m shearbatch.app.stamps ROOT PNG RUN_ID...``, which renders them with the
campaign's config (:func:`render`, JAX set up as an entry point sets it) and writes the
PNG. Where that process fails (no JAX installed, a damaged file), the caller writes the
report without the stamps and says why in one line.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from ..io import atomic

__all__ = ["render", "stamps_png"]

logger = logging.getLogger("shearbatch")

#: seconds the rendering process may take (measured at Level 2 on the 2-core CPU: 7 s
#: with the campaign's compilation cache, 18 s without)
TIMEOUT_S = 600


class StampsFailed(RuntimeError):
    """The rendering process failed; the message is its last line of error output."""


def stamps_png(root: Path, run_ids: Sequence[str], path: Path) -> Path:
    """The stamps of ``run_ids`` (realization directory names under the campaign root
    ``root``) as a PNG at ``path``, rendered in a child process; raises
    :class:`StampsFailed` with the child's last error line."""
    cmd = [sys.executable, "-m", "shearbatch.app.stamps", str(root), str(path), *run_ids]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S,
                             check=False)  # fmt: skip
    except subprocess.TimeoutExpired:
        raise StampsFailed(f"rendering took over {TIMEOUT_S} s") from None
    if out.returncode != 0:
        lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
        raise StampsFailed(lines[-1] if lines else f"exit status {out.returncode}")
    return path


def render(root: Path, run_ids: Sequence[str], cfg: dict[str, Any], path: Path) -> Path:
    """Render and write the stamps in this process (it imports JAX): the data from each
    realization's posterior.nc, the model from the campaign's config ``cfg`` at each
    one's estimate. JAX is set up as an entry point sets it (precision, the campaign's
    compilation cache) and restored after."""
    import numpy as np
    import xarray as xr

    from .. import jax_setup
    from ..analysis.plots import stamps_figure
    from ..io import POSTERIOR, TRUTH, find_realization_dirs, read_json
    from ..schema import current_config
    from ..spec import run_spec
    from .preview import models_at_estimate

    where = {p.name: p for p in find_realization_dirs(root)}
    images, reals, homes = [], [], []
    for rid in run_ids:
        d = where[rid]
        with xr.open_dataset(d / POSTERIOR, group="observed_data", engine="netcdf4") as ds:
            images.append(np.asarray(ds["obs"].values, float))
        t = read_json(d / TRUTH)
        reals.append(_Real(rid, float(t["g1"]), float(t["g2"])))
        homes.append(d.parent)
    # the campaign's precision, and its compilation cache when it has one: the model's
    # constants (PSF tables, reference S/N) are computed op by op, each op a compiled
    # program that bias-run compiled and cached already (measured at Level 2 on the 2-core
    # CPU: 18 s without the cache, 7 s with it)
    # On a GPU node JAX would start here taking 75% of the GPU's memory up front for three
    # stamps: it takes what it uses unless told otherwise
    cache = jax_setup.default_cache_dir(root)
    cache = cache if Path(cache).is_dir() else "off"
    x64 = str((cfg.get("inference") or {}).get("precision", "float64")) == "float64"
    lazy = {"XLA_PYTHON_CLIENT_PREALLOCATE": os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE",
                                                            "false")}  # fmt: skip
    with jax_setup.scoped_environ(lazy):
        saved = jax_setup.flag_values()
        try:
            jax_setup.configure_flags(x64, None if cache == "off" else cache)
            logger.info("%s", jax_setup.backend_line(x64, cache))
            spec = run_spec(current_config().model_validate(cfg))  # validated when run
            models = np.concatenate([models_at_estimate(_Where(spec, h), [r])
                                     for h, r in zip(homes, reals, strict=True)])  # fmt: skip
        finally:
            jax_setup.set_flags(saved)
    fig = stamps_figure(np.stack(images), list(run_ids), spec.model.noise_sigma, models)
    with atomic.replacing(path) as tmp:
        fig.savefig(tmp, dpi=90, format="png")
    return path


class _Real(NamedTuple):  # what models_at_estimate reads of a planned realization
    run_id: str
    g1: float
    g2: float


class _Where(NamedTuple):  # what models_at_estimate reads of a plan
    spec: Any
    output_dir: Path


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m shearbatch.app.stamps ROOT PNG RUN_ID...``: exit 0 with the PNG
    written, else 1 (2: bad arguments) with one line on stderr, which
    :func:`stamps_png` quotes."""
    import logging

    from .inputs import campaign_config

    # this process's own entry point: its log goes to stderr, one line per message,
    # warnings and errors only (the parent reads the last line)
    logging.basicConfig(level=logging.WARNING, format="%(message)s", stream=sys.stderr)
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 3:
        logger.error("usage: python -m shearbatch.app.stamps ROOT PNG RUN_ID...")
        return 2
    root, png, run_ids = Path(args[0]), Path(args[1]), args[2:]
    try:
        cfg, _, _ = campaign_config(root)
        if cfg is None:
            raise ValueError(f"{root}: no config.yaml or campaign.json config")
        render(root, run_ids, cfg, png)
    except Exception as err:  # one line for the parent's warning
        logger.error("%s", f"{type(err).__name__}: {err}".splitlines()[0])
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
