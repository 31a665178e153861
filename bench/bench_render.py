"""Throughput of :func:`shearbatch.render.draw_galaxy` on a vmapped batch of stamps.

Stamps per second for a jitted ``vmap`` over 1024 48x48 stamps (0.263"/px, Gaussian
PSF sigma 0.35") with random e1, e2, g1, g2, hlr and offsets, in float32 and float64,
forward only and value + gradient of a scalar loss with respect to every stamp's
parameters. Compile time is excluded; each figure is the median of several timed
repetitions, each ended with ``block_until_ready``. Results are printed and written
to ``results/benchmarks/render.json``.

Run from the repository root::

    .venv/bin/python bench/bench_render.py
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)  # a script: float32 runs use explicit dtypes

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from shearbatch.render import _default_fft_size, draw_galaxy  # noqa: E402

NX = NY = 48
SCALE = 0.263
PSF_SIGMA = 0.35


def make_params(batch: int, dtype, seed: int = 0) -> dict[str, jax.Array]:
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


def draw_one(params: dict[str, jax.Array]) -> jax.Array:
    psf = jnp.asarray(PSF_SIGMA, params["flux"].dtype)
    return draw_galaxy(**params, psf_sigma=psf, nx=NX, ny=NY, scale=SCALE)


def loss(params: dict[str, jax.Array], data: jax.Array) -> jax.Array:
    """Gaussian negative log-likelihood summed over stamps (independent per stamp)."""
    return 0.5 * jnp.sum((jax.vmap(draw_one)(params) - data) ** 2)


def build(mode: str, chunk: int | None):
    """jit of the forward batch, or of value_and_grad of :func:`loss` over it.

    ``chunk=None`` vmaps over the whole batch; otherwise ``lax.map`` runs the vmapped
    program (forward, or value and per-stamp gradient) over chunks of ``chunk`` stamps,
    which keeps the intermediates in cache.
    """
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


def time_it(fn, args, repeats: int) -> list[float]:
    jax.block_until_ready(fn(*args))  # compile + warm up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--chunk", type=int, default=64, help="chunk size for the lax.map rows")
    parser.add_argument("--out", type=Path, default=Path("results/benchmarks/render.json"))
    args = parser.parse_args()
    if args.batch % args.chunk:
        parser.error("--batch must be a multiple of --chunk")

    results = []
    for dtype in (jnp.float32, jnp.float64):
        params = make_params(args.batch, dtype)
        data = jax.jit(jax.vmap(draw_one))(make_params(args.batch, dtype, seed=1))
        for mode in ("forward", "value_and_grad"):
            for chunk in (None, args.chunk):
                fn = build(mode, chunk)
                fn_args = (params,) if mode == "forward" else (params, data)
                times = time_it(fn, fn_args, args.repeats)
                median = statistics.median(times)
                batching = "vmap" if chunk is None else f"lax.map(vmap, batch_size={chunk})"
                row = {
                    "dtype": jnp.dtype(dtype).name,
                    "mode": mode,
                    "batching": batching,
                    "median_s": median,
                    "stamps_per_s": args.batch / median,
                    "times_s": times,
                }
                results.append(row)
                print(
                    f"{row['dtype']:8s} {mode:15s} {batching:32s} "
                    f"{row['stamps_per_s']:9.0f} stamps/s (median {1e3 * median:.1f} ms / batch)"
                )

    report = {
        "benchmark": "render.draw_galaxy, jit(vmap) over a batch",
        "batch": args.batch,
        "stamp": [NY, NX],
        "scale": SCALE,
        "psf_sigma": PSF_SIGMA,
        "fft_size": _default_fft_size(NX, NY),
        "repeats": args.repeats,
        "jax_version": jax.__version__,
        "platform": jax.default_backend(),
        "devices": [str(d) for d in jax.devices()],
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "load_average_1m": os.getloadavg()[0],
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
