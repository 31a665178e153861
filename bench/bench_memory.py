"""Device memory per galaxy-lane of the Level 2 programs: interim weights in draw chunks.

Compiles (``lower().compile()``, nothing runs) the batched MAP + Laplace program of
``configs/level2.yaml`` (32 galaxies of 16x16 per realization) for two lane counts, with
the whole batch in one ``vmap`` (as on a GPU: no lane chunks), and reads XLA's buffer
assignment (``compiled.memory_analysis()``: arguments + outputs + temporaries). The
per-lane memory is the slope between the two lane counts; per galaxy-lane it is that over
the 32 galaxies. Three programs:

- ``joint``: ``shear_model: joint`` (g a latent of each realization), the reference;
- ``interim_all_draws``: the interim model with its importance weights rendered for all
  1,000 Laplace draws at once (``DRAW_CHUNK`` = the draws: the program before issue 33);
- ``interim``: the interim model as shipped (``shearbatch.core.methods.map.DRAW_CHUNK``
  draws at a time).

The issue's target: the interim model's memory per galaxy-lane within 4x the joint
model's. These are the compiler's figures for the backend it runs on (CPU here; the GPU
record is ``bench/bench_gpu.py``'s). Prints them, writes ``results/benchmarks/memory.json``::

    .venv/bin/python bench/bench_memory.py [--lanes 2 8]
"""

from __future__ import annotations

from typing import Any

import yaml

import _harness as h


def program_memory(raw: dict[str, Any], lanes: int, draw_chunk: int | None) -> dict[str, Any]:
    import jax
    import jax.numpy as jnp

    from shearbatch.core.batching import batched, realization_keys
    from shearbatch.core.methods import get as get_method
    from shearbatch.core.methods import map as map_method
    from shearbatch.core.posterior import build_posterior
    from shearbatch.schema import parse_config
    from shearbatch.spec import run_spec

    spec = run_spec(parse_config(raw))
    saved = map_method.DRAW_CHUNK
    if draw_chunk is not None:
        map_method.DRAW_CHUNK = draw_chunk
    try:
        method = get_method(spec.inference)
        post = build_posterior(spec.model)
        program = batched(lambda key, obs: method.fit(key, obs, post))
        im = spec.model.image
        keys = realization_keys(list(range(lanes)), spec.rng_seed)
        obs = jax.ShapeDtypeStruct((lanes, im.n_objects, im.ny, im.nx), jnp.float64)
        compiled, secs = h.compile_aot(program, keys, obs)
    finally:
        map_method.DRAW_CHUNK = saved
    mem = compiled.memory_analysis()
    total = mem.argument_size_in_bytes + mem.output_size_in_bytes + mem.temp_size_in_bytes
    return {"lanes": lanes, "compile_s": secs, "total_bytes": int(total),
            "temp_bytes": int(mem.temp_size_in_bytes)}  # fmt: skip


def draw(fig, res: dict[str, Any]) -> None:
    ax = fig.subplots()
    names = list(res["programs"])
    vals = [res["programs"][n]["mib_per_galaxy_lane"] for n in names]
    ax.bar(names, vals)
    for i, v in enumerate(vals):
        ax.text(i, v, f"{v:.2f}", ha="center", va="bottom")
    ref = res["programs"]["joint"]["mib_per_galaxy_lane"]
    ax.axhline(4 * ref, color="C3", ls="--", label="4x the joint model (target)")
    ax.set_yscale("log")
    ax.set_ylabel("MiB per galaxy-lane (XLA memory analysis)")
    ax.set_title("Level 2 MAP + Laplace, float64, one vmap over the lanes")
    ax.legend()


def main(argv: list[str] | None = None) -> None:
    ap = h.parser(__doc__, "memory", repeats=1)
    ap.add_argument("--lanes", type=int, nargs=2, default=[2, 8])
    args = ap.parse_args(argv)
    h.configure(True)
    res = h.provenance("float64")
    h.banner(res)
    res["settings"] = h.settings(args)
    base = yaml.safe_load((h.ROOT / "configs" / "level2.yaml").read_text())
    joint = yaml.safe_load((h.ROOT / "configs" / "level2.yaml").read_text())
    joint["inference"]["shear_model"] = "joint"
    m = base["image"]["n_objects"]
    n_draws = 1000
    res["programs"] = {}
    for name, raw, chunk in (("joint", joint, None), ("interim_all_draws", base, n_draws),
                             ("interim", base, None)):  # fmt: skip
        a, b = (program_memory(raw, n, chunk) for n in args.lanes)
        per_lane = (b["total_bytes"] - a["total_bytes"]) / (b["lanes"] - a["lanes"])
        res["programs"][name] = {"at": [a, b], "mib_per_lane": per_lane / 2**20,
                                 "mib_per_galaxy_lane": per_lane / m / 2**20}  # fmt: skip
        print(f"{name:18s}: {per_lane / 2**20:8.2f} MiB per lane, "
              f"{per_lane / m / 2**20:6.3f} MiB per galaxy-lane")  # fmt: skip
    p = res["programs"]
    res["interim_over_joint"] = (
        p["interim"]["mib_per_galaxy_lane"] / p["joint"]["mib_per_galaxy_lane"]
    )
    res["all_draws_over_chunked"] = (p["interim_all_draws"]["mib_per_lane"]
                                     / p["interim"]["mib_per_lane"])  # fmt: skip
    print(f"interim / joint: {res['interim_over_joint']:.2f}x (target <= 4); all draws at once / "
          f"in chunks: {res['all_draws_over_chunked']:.1f}x")  # fmt: skip
    h.write_json(res, args.out, draw)


if __name__ == "__main__":
    main()
