"""``bias-run``'s options: the click decorators, verbatim, collected by :func:`run_options` from
here (config and campaign), :mod:`.run_execution` and :mod:`.run_submission`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from .options import _help
from .params import BATCH_SIZE
from .run_execution import _execution
from .run_submission import _submission


@click.option(
    "--config",
    "--shine-config",
    "config_path",
    default=None,
    help="YAML config: image, psf, gal, inference, campaign (every key: docs/config.md). "
    "--shine-config is an alias: it reads SHINE-style configs (the same GalSim-like sections). "
    "[required, except with --show-config CONFIG]",
)
@click.option(
    "--show-config",
    is_flag=False,
    flag_value="",
    default=None,
    metavar="[CONFIG]",
    help="Print the resolved config as YAML (every default filled in, the flags given here "
    "applied) and exit; CONFIG defaults to --config. [default: off]",
)
@click.option(
    "--set",
    "set_values",
    multiple=True,
    metavar="KEY.PATH=VALUE",
    help=_help(
        "Set any config key, repeatable (GalSim's convention): --set image.noise.snr=15 "
        "--set gal.half_light_radius.mean=0.6. VALUE is YAML (a number, a word, null, "
        "[0.01, 0.02]); applied to the config before the flags and validated by the schema "
        "like the file; recorded in campaign.json (overrides) and the frozen config.yaml.",
        default="none",
    ),
)
@click.option(
    "--g1-true",
    type=float,
    default=None,
    help=_help(
        "Single realization: its true g1 (with --seed, --run-id).",
        default="none: a campaign from the shear grid",
    ),
)
@click.option(
    "--g2-true",
    type=float,
    default=None,
    help=_help(
        "True g2 of a single realization, or of every grid point without --shear-grid-g2.",
        config="campaign.g2",
    ),
)
@click.option(
    "--seed",
    type=int,
    default=None,
    help=_help("Single realization: its seed.", config="campaign.base_seed"),
)
@click.option(
    "--run-id",
    default=None,
    help=_help(
        "Single realization: its directory name under --output-dir.",
        default="g1_<g1>_g2_<g2>_s<seed>",
    ),
)
@click.option(
    "--shear-grid",
    type=float,
    multiple=True,
    help=_help(
        "Campaign: true g1 values, space- or comma-separated (-0.05 0.05 or "
        "-0.05,0.05); replaces the config's grid and turns SBC off.",
        config="campaign.shear_grid",
    ),
)
@click.option(
    "--shear-grid-g2",
    type=float,
    multiple=True,
    help=_help(
        "Campaign: true g2 values; the grid is every (g1, g2) pair of the two lists, so "
        "bias-stats measures m1, c1, m2 and c2. Without it g2 is constant "
        "(--g2-true) and m2 is undefined.",
        config="campaign.shear_grid_g2",
    ),
)
@click.option(
    "--n-realizations",
    type=int,
    default=None,
    help=_help(
        "Realizations (seeds base_seed, base_seed + 1, ...) per grid point.",
        config="campaign.n_realizations",
    ),
)
@click.option(
    "--base-seed",
    type=int,
    default=None,
    help=_help(
        "Seed of realization 0 (the same seeds at every grid point).", config="campaign.base_seed"
    ),
)
@click.option(
    "--paired/--no-paired",
    default=None,
    help=_help(
        "+g/-g twins sharing seed, galaxy and noise (the paired estimator cancels the noise).",
        config="campaign.paired",
    ),
)
@click.option(
    "--rotations",
    type=int,
    default=None,
    help=_help(
        "Ring design: 1, 2 or 4 copies per seed with every intrinsic shape rotated by "
        "k*180/rotations degrees (shape-noise cancellation; run ids end in _r<k>).",
        config="campaign.rotations",
    ),
)
@click.option(
    "--shear-from-prior",
    is_flag=True,
    default=None,
    help=_help(
        "SBC: draw each realization's true shear from the inference prior (no grid).",
        config="campaign.shear_from_prior",
    ),
)
@click.option(
    "--batch-size",
    type=BATCH_SIZE,
    default=None,
    metavar="N|auto",
    help=_help(
        "Realizations per compiled batch (lanes of one jit(vmap) program). auto: the most "
        "lanes that fit the memory budget by XLA's memory analysis of the compiled program "
        "(logged with why); a batch that does not fit runs in lane chunks that do.",
        config="campaign.batch_size",
    ),
)
@click.option(
    "--memory-budget",
    default=None,
    metavar="SIZE",
    help=_help(
        "Device memory one batch may use, e.g. 2GiB or 500MB (also $SHEARBATCH_MEMORY_BUDGET).",
        default="80% of the GPU's free memory; on a CPU of the available RAM",
    ),
)
@click.option(
    "--output-dir",
    default=None,
    help=_help(
        "Campaign root: one directory per realization is written under it.",
        config="campaign.output_dir",
    ),
)
def _campaign() -> None:
    """Holder of the options above (the config and the campaign; click keeps them in
    ``__click_params__``)."""


def run_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """``f`` with every ``bias-run`` option (as if decorated by each), in ``--help``'s order."""
    f.__click_params__ = [
        *getattr(f, "__click_params__", []),
        *_submission.__click_params__,
        *_execution.__click_params__,
        *_campaign.__click_params__,
    ]  # type: ignore[attr-defined]
    return f
