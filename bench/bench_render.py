"""Throughput of :func:`shearbatch.render.draw_galaxy` on a vmapped batch of stamps.

Stamps per second for a jitted ``vmap`` over ``--batch`` (1024) 48x48 stamps
(0.263"/px) with random e1, e2, g1, g2, hlr and offsets, in float32 and float64,
forward only and value + gradient of a scalar loss with respect to every stamp's
parameters, each also run as ``lax.map`` over chunks of ``--chunk`` stamps, for each
PSF of ``--psfs``: ``gaussian`` (round, sigma 0.35", the separable fast path),
``gaussian_e`` (the same sheared by e = (0.03, -0.02): the 2-D PSF factor),
``moffat`` (beta 3.5, the same FWHM 0.824", e = (0.03, -0.02): the interpolated
Hankel table) and ``moffat_trunc`` (the same truncated at 3 FWHM). Compile time is excluded; each figure is the median of
``--repeats`` calls, each ended with ``block_until_ready``. Prints a table and writes
``results/benchmarks/render.json``::

    .venv/bin/python bench/bench_render.py

Then the cost of derivatives per stamp (``cost_per_stamp``), float64, for stamps of
``--cost-stamps`` (16, 32, 48) with the ``gaussian`` and ``moffat`` PSFs, at the period
and alias band the noise rule chooses for ``configs/survey_snr30.yaml`` with that stamp and
PSF (:func:`shearbatch.core.period.choose_fft_size`, ``choose_alias_band``;
``fft_size_default`` beside it): the
forward pass, ``value_and_grad`` of the summed Gaussian loss and a forward-mode Jacobian
in the 8 parameters (``jacfwd``, what a Gauss-Newton step needs), each in us per stamp
(a jitted ``vmap`` over ``--cost-batch`` stamps; median process CPU time of ``--repeats``
interleaved calls, and the median wall time under ``wall_us``), and their ratios to the
forward pass.
"""

from __future__ import annotations

import time
from typing import Any

import _harness as h

SCALE = 0.263
PSF_SIGMA = 0.35
PSF_FWHM = PSF_SIGMA * 2.0 * (2.0 * 0.6931471805599453) ** 0.5
PSF_E = (0.03, -0.02)
PSFS = {
    "gaussian": {"psf_sigma": PSF_SIGMA},
    "gaussian_e": {"psf_sigma": PSF_SIGMA, "psf_e1": PSF_E[0], "psf_e2": PSF_E[1]},
    "moffat": {
        "psf_profile": "moffat",
        "psf_fwhm": PSF_FWHM,
        "psf_beta": 3.5,
        "psf_e1": PSF_E[0],
        "psf_e2": PSF_E[1],
    },
    "moffat_trunc": {
        "psf_profile": "moffat",
        "psf_fwhm": PSF_FWHM,
        "psf_beta": 3.5,
        "psf_trunc": 3 * PSF_FWHM,
        "psf_e1": PSF_E[0],
        "psf_e2": PSF_E[1],
    },
}


def make_params(batch: int, dtype, seed: int = 0) -> dict[str, Any]:
    import jax.numpy as jnp
    import numpy as np

    rng = np.random.default_rng(seed)
    params = {
        "flux": rng.uniform(50.0, 150.0, batch),
        "half_light_radius": rng.uniform(0.3, 0.8, batch),
        "e1": rng.uniform(-0.3, 0.3, batch),
        "e2": rng.uniform(-0.3, 0.3, batch),
        "g1": rng.uniform(-0.1, 0.1, batch),
        "g2": rng.uniform(-0.1, 0.1, batch),
        "offset": rng.uniform(-0.5, 0.5, (batch, 2)),
    }
    return {k: jnp.asarray(v, dtype=dtype) for k, v in params.items()}


def build(mode: str, chunk: int | None, stamp: int, psf: str = "gaussian"):
    """jit of the forward batch, or of value_and_grad of the summed Gaussian loss.

    ``chunk=None`` vmaps over the whole batch; otherwise ``lax.map`` runs the vmapped
    program over chunks of ``chunk`` stamps, which keeps the intermediates in cache.
    """
    import jax
    import jax.numpy as jnp
    import numpy as np

    from shearbatch.render import draw_galaxy

    def draw_one(params):
        # NumPy scalars of the stamps' dtype: a fixed PSF, known when the program is traced
        # (as a config's), whose transform the renderer evaluates there
        dtype = params["flux"].dtype
        kw = {k: np.asarray(v, dtype) if k in ("psf_sigma", "psf_e1", "psf_e2") else v
              for k, v in PSFS[psf].items()}  # fmt: skip
        return draw_galaxy(**params, **kw, nx=stamp, ny=stamp, scale=SCALE)

    def loss(params, data):  # independent per stamp
        return 0.5 * jnp.sum((jax.vmap(draw_one)(params) - data) ** 2)

    if mode == "forward":
        if chunk is None:
            return jax.jit(jax.vmap(draw_one))
        return jax.jit(lambda params: jax.lax.map(draw_one, params, batch_size=chunk))
    if chunk is None:
        return jax.jit(jax.value_and_grad(loss))

    def chunked(params, data):
        def split(x):
            return x.reshape((-1, chunk, *x.shape[1:]))

        values, grads = jax.lax.map(
            lambda a: jax.value_and_grad(loss)(*a), (jax.tree.map(split, params), split(data))
        )
        return values.sum(), jax.tree.map(lambda g: g.reshape((-1, *g.shape[2:])), grads)

    return jax.jit(chunked)


def chosen_period(stamp: int, psf: str) -> tuple[int, int, float]:
    """(period the noise rule picks, renderer default, alias band the noise rule picks) for
    configs/survey_snr30.yaml with this stamp and PSF (the bench's PSFs)."""
    import yaml

    from shearbatch import spec
    from shearbatch.core.period import default_fft_size
    from shearbatch.schema import parse_config

    raw = yaml.safe_load((h.ROOT / "configs" / "survey_snr30.yaml").read_text())
    raw["image"].update(size_x=stamp, size_y=stamp)
    kw = PSFS[psf]
    if kw.get("psf_profile") == "moffat":
        raw["psf"] = {"type": "Moffat", "beta": kw["psf_beta"], "fwhm": kw["psf_fwhm"],
                      "e1": kw["psf_e1"], "e2": kw["psf_e2"]}  # fmt: skip
        if "psf_trunc" in kw:
            raw["psf"]["trunc"] = kw["psf_trunc"]
    else:
        raw["psf"] = {"type": "Gaussian", "sigma": kw["psf_sigma"],
                      "e1": kw.get("psf_e1", 0.0), "e2": kw.get("psf_e2", 0.0)}  # fmt: skip
    problem = spec.problem(parse_config(raw))
    default = default_fft_size(problem._replace(image=problem.image._replace(fft_size=None)))
    return problem.image.fft_size, default, problem.image.alias_band


def cost_per_stamp(
    stamp: int, psf: str, fft_size: int, batch: int, repeats: int, alias_band: float = 0.0
) -> dict:
    """Forward, value_and_grad and jacfwd (8 parameters) per stamp, float64, in us."""
    import jax
    import jax.numpy as jnp

    from shearbatch.render import draw_galaxy

    names = ("flux", "half_light_radius", "e1", "e2", "g1", "g2")

    def one(x):  # x: the 8 parameters of one stamp
        kw = dict(zip(names, x[:6], strict=True))
        return draw_galaxy(**kw, offset=x[6:8], **PSFS[psf], nx=stamp, ny=stamp, scale=SCALE,
                           fft_size=fft_size, alias_band=alias_band)  # fmt: skip

    def stacked(p):
        return jnp.concatenate([jnp.stack([p[k] for k in names], axis=1), p["offset"]], axis=1)

    x = stacked(make_params(batch, "float64"))
    fwd = jax.jit(jax.vmap(one))
    data = fwd(stacked(make_params(batch, "float64", seed=1)))
    vg = jax.jit(jax.value_and_grad(lambda x, d: 0.5 * jnp.sum((jax.vmap(one)(x) - d) ** 2)))
    jf = jax.jit(jax.vmap(jax.jacfwd(one)))
    progs = {"forward": (fwd, (x,)), "value_and_grad": (vg, (x, data)), "jacfwd": (jf, (x,))}
    wall = {}
    for mode, (fn, args) in progs.items():
        _, times, _ = h.time_calls(fn, args, repeats)
        wall[mode] = 1e6 * h.median(times) / batch
    # process CPU time, the three programs interleaved: on a loaded shared machine the
    # ratios of wall times of short calls swing by 2x between runs, these much less
    cpu = {mode: [] for mode in progs}
    for _ in range(repeats):
        for mode, (fn, args) in progs.items():
            t0 = time.process_time()
            jax.block_until_ready(fn(*args))
            cpu[mode].append(time.process_time() - t0)
    us = {mode: 1e6 * h.median(v) / batch for mode, v in cpu.items()}
    return {"stamp": stamp, "psf": psf, "fft_size": fft_size, "alias_band": alias_band,
            "batch": batch,
            "forward_us": us["forward"], "value_and_grad_us": us["value_and_grad"],
            "jacfwd_us": us["jacfwd"], "ratio_value_and_grad": us["value_and_grad"] / us["forward"],
            "ratio_jacfwd": us["jacfwd"] / us["forward"],
            "wall_us": wall}  # fmt: skip


def draw(fig, rec: dict) -> None:
    """Stamps per second of the faster batching per PSF, dtype and mode, and the cost of
    derivatives per stamp over the forward pass (the PNG beside the JSON)."""
    ax, ax2 = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
    for psf in dict.fromkeys(r["psf"] for r in rec.get("cost_per_stamp", [])):
        rows = [r for r in rec["cost_per_stamp"] if r["psf"] == psf]
        xs = [r["stamp"] for r in rows]
        ax2.plot(xs, [r["ratio_value_and_grad"] for r in rows], "o-", label=f"{psf} value+grad")
        ax2.plot(xs, [r["ratio_jacfwd"] for r in rows], "s--", label=f"{psf} jacfwd (8)")
    ax2.axhline(3.0, color="grey", lw=0.8, ls=":")
    ax2.set_xlabel("stamp side (pixels), period as chosen")
    ax2.set_ylabel("time / forward pass (float64)")
    ax2.legend(fontsize=6)
    best: dict[tuple[str, str, str], float] = {}
    for r in rec["results"]:
        key = (r["psf"], r["dtype"], r["mode"])
        best[key] = max(best.get(key, 0.0), r["stamps_per_s"])
    psfs = list(dict.fromkeys(k[0] for k in best))
    series = list(dict.fromkeys((k[1], k[2]) for k in best))
    width = 0.8 / len(series)
    for i, (dtype, mode) in enumerate(series):
        ys = [best.get((p, dtype, mode), 0.0) for p in psfs]
        ax.bar([j + i * width for j in range(len(psfs))], ys, width, label=f"{dtype} {mode}")
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(psfs))], psfs)
    ax.set_yscale("log")
    ax.set_ylabel("stamps / s (median, faster batching)")
    ax.legend(fontsize=7)
    ax.set_title(f"render.draw_galaxy: batch {rec['batch']}, stamp {rec['stamp'][0]}x"
                 f"{rec['stamp'][1]} (shared 2-core CPU, loaded)", fontsize=10)  # fmt: skip


def main(argv: list[str] | None = None) -> dict:
    ap = h.parser(__doc__, "render", repeats=7)
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--chunk", type=int, default=64, help="chunk size of the lax.map rows")
    ap.add_argument("--stamp", type=int, default=48, help="stamp size in pixels")
    ap.add_argument("--dtypes", nargs="+", choices=["float32", "float64"],
                    default=["float32", "float64"])  # fmt: skip
    ap.add_argument("--psfs", nargs="+", choices=sorted(PSFS), default=list(PSFS))
    ap.add_argument("--cost-stamps", nargs="+", type=int, default=[16, 32, 48],
                    help="stamp sides of the per-stamp derivative cost (float64)")  # fmt: skip
    ap.add_argument("--cost-batch", type=int, default=32, help="stamps per timed call there")
    args = ap.parse_args(argv)
    if args.batch % args.chunk:
        ap.error("--batch must be a multiple of --chunk")
    h.configure(True)  # float32 rows use explicit dtypes
    import jax.numpy as jnp

    from shearbatch.core.render import _default_fft_size

    info = h.provenance(None)
    h.banner(info)
    table = h.Table([("psf", "13s"), ("dtype", "8s"), ("mode", "15s"), ("batching", "32s"),
                     ("stamps/s", "9.0f"), ("ms/batch", "9.1f")])  # fmt: skip
    results = []
    for psf in args.psfs:
        for dtype in args.dtypes:
            params = make_params(args.batch, dtype)
            data = build("forward", None, args.stamp, psf)(make_params(args.batch, dtype, seed=1))
            for mode in ("forward", "value_and_grad"):
                for chunk in (None, args.chunk):
                    fn = build(mode, chunk, args.stamp, psf)
                    fn_args = (params,) if mode == "forward" else (params, data)
                    _, times, _ = h.time_calls(fn, fn_args, args.repeats)
                    median = h.median(times)
                    batching = "vmap" if chunk is None else f"lax.map(vmap, batch_size={chunk})"
                    row = {"psf": psf, "dtype": jnp.dtype(dtype).name, "mode": mode,
                           "batching": batching, "median_s": median,
                           "stamps_per_s": args.batch / median, "times_s": times}  # fmt: skip
                    results.append(row)
                    table.row(psf, row["dtype"], mode, batching, row["stamps_per_s"], 1e3 * median)
    cost = []
    ctable = h.Table([("stamp", "5d"), ("psf", "9s"), ("period", "6d"), ("band", "5.2f"),
                      ("fwd us", "8.1f"),
                      ("v+g us", "8.1f"), ("ratio", "6.2f"), ("jacfwd us", "9.1f"),
                      ("ratio", "6.2f")])  # fmt: skip
    for stamp in args.cost_stamps:
        for psf in ("gaussian", "moffat"):
            n, default, band = chosen_period(stamp, psf)
            row = cost_per_stamp(stamp, psf, n, args.cost_batch, args.repeats, band)
            row["fft_size_default"] = default
            cost.append(row)
            ctable.row(stamp, psf, n, band, row["forward_us"], row["value_and_grad_us"],
                       row["ratio_value_and_grad"], row["jacfwd_us"], row["ratio_jacfwd"])  # fmt: skip
    report = {
        "benchmark": "render.draw_galaxy, jit(vmap) over a batch",
        "batch": args.batch,
        "stamp": [args.stamp, args.stamp],
        "scale": SCALE,
        "psf_sigma": PSF_SIGMA,
        "psfs": {k: PSFS[k] for k in args.psfs},
        "fft_size": _default_fft_size(args.stamp, args.stamp),
        "repeats": args.repeats,
        **info,
        "jax_version": info["jax"],  # the committed JSON's names
        "load_average_1m": info["load_average_start"][0],
        "settings": h.settings(args),
        "results": results,
        "cost_per_stamp": cost,
    }
    return h.write_json(report, args.out, draw=draw)


if __name__ == "__main__":
    main()
