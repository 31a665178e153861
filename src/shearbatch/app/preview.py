"""Previews: PNGs of a plan's first stamps, and of the models at their estimates."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..io import atomic
from .plan import Plan

__all__ = ["models_at_estimate", "preview"]

logger = logging.getLogger("shearbatch")


def preview(plan: Plan, path: Path, n: int = 4, fitted: bool = False,
            notify: Callable[[str], None] = logger.info) -> None:  # fmt: skip
    """PNG of the first ``n`` realizations of this task's plan: the simulated data, and
    (``fitted``, after the run) the model at each one's estimate and the residual."""
    from ..analysis.plots import stamps_figure
    from ..campaign import simulate_realizations

    reals = plan.mine[:n]
    if fitted:
        reals = [r for r in reals if (plan.output_dir / r.run_id / "posterior.nc").is_file()]
    if not reals:
        return
    sim = simulate_realizations(plan.spec, reals)
    models = models_at_estimate(plan, reals) if fitted else None
    fig = stamps_figure(sim.images, [r.run_id for r in reals], sim.noise_sigma, models)
    with atomic.replacing(path) as tmp:
        fig.savefig(tmp, dpi=100, format="png")
    what = "data, model at the estimate, residual" if fitted else "data"
    notify(f"preview of {len(reals)} realization(s) ({what}): {path}")


_RENDER: dict[int, tuple[Any, Callable]] = {}


def _renderer(problem: Any) -> Callable:
    """``render_stamps(problem, params, g)`` as one compiled program per problem (kept while
    the problem lives): run op by op, the first Level 2 render compiles hundreds of
    small programs (measured 26 s against 0.9 s on the 2-core CPU)."""
    import jax

    from ..core.generate import render_stamps

    key = id(problem)
    if key not in _RENDER or _RENDER[key][0] is not problem:
        _RENDER[key] = (problem, jax.jit(lambda params, g: render_stamps(problem, params, g)))
    return _RENDER[key][1]


def models_at_estimate(plan: Plan, reals: Sequence[Any]) -> Any:
    """Noise-free model stamps (B, M, H, W) at each realization's estimate (the MAP /
    Laplace centre where recorded, else the posterior median), from its written files."""
    import json

    import jax.numpy as jnp
    import numpy as np
    import xarray as xr

    from ..core.convergence import Convergence
    from ..core.generate import FIELDS

    problem = plan.spec.model
    render = _renderer(problem)
    fixed = problem.fields._asdict()
    m = problem.image.n_objects
    out = []
    for r in reals:
        d = plan.output_dir / r.run_id
        conv = Convergence.from_json(json.loads((d / "convergence.json").read_text()))
        mode = conv.mode
        with xr.open_dataset(d / "posterior.nc", group="posterior", engine="netcdf4") as ds:
            draws = {k: np.asarray(v.values, float) for k, v in ds.data_vars.items()}

        def est(site: str, default: float, mode=mode, draws=draws) -> Any:
            if site in mode:
                return np.asarray(mode[site], float)
            if site in draws:
                return np.median(draws[site].reshape(-1, *draws[site].shape[2:]), axis=0)
            return np.asarray(default, float)

        params = {f: jnp.broadcast_to(jnp.asarray(est(f, fixed[f].args[0] if fixed[f].args
                                                           else 0.0)), (m,))
                  for f in FIELDS}  # fmt: skip
        g = jnp.asarray([est("g1", r.g1), est("g2", r.g2)])
        out.append(np.asarray(render(params, g)))
    return np.stack(out)
