"""Benchmark the start-up of stages 2 and 3: ``bias-stats --help``, ``bias-extract --help``
and ``import shearbatch.cli.stats``, each in a fresh process, against a 1 s target.

Stages 2 and 3 read files and fit lines: they load neither JAX nor the engine (issue 57).
Each command runs ``--repeats`` times (7) in a new interpreter, after one untimed run
that warms the OS file cache and the bytecode; the wall time of the whole process is
timed and the median reported (the machine is shared). ``import jax`` in a fresh
interpreter is timed the same way, for reference: part of what a stage paid before (the
engine brought NumPyro, Optax and its own modules with it). A separate,
untimed run of each command in the same interpreter records whether it loaded JAX or
any module under ``shearbatch/engine/``.

``--baseline-src DIR`` also times another source tree (``PYTHONPATH=DIR``, e.g. a
checkout of the commit before: ``git worktree add /tmp/base <commit>`` then
``--baseline-src /tmp/base/src``), interleaved with this one repeat by repeat so that
both see the same load; its figures go under ``before``.

    .venv/bin/python bench/bench_import.py [--repeats 7] [--baseline-src DIR]

Writes ``results/benchmarks/import.json`` and ``import.png``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import _harness as h

TARGET_S = 1.0  # bias-stats --help: "well under 1 s"

#: what a run reports of its interpreter once the command is done (stderr, last line)
_LOADED = (
    "import sys; print('LOADED', 'jax' in sys.modules, "
    "any(m.startswith('shearbatch.engine') for m in sys.modules), file=sys.stderr)"
)


def _help_of(attr: str, prog: str) -> str:
    """The console script ``prog`` (``shearbatch.cli:<attr>``) asked for its help, then
    what it loaded: what the script runs, in an interpreter we can look into."""
    return (f"import sys\nfrom shearbatch.cli import {attr}\ntry:\n"
            f"    {attr}.main(args=['--help'], prog_name={prog!r})\n"
            f"except SystemExit:\n    pass\n{_LOADED}\n")  # fmt: skip


def commands() -> dict[str, tuple[list[str], str]]:
    """label -> (the timed argv, the untimed check's code)."""
    py = sys.executable
    bindir = Path(py).parent

    def script(name: str, sub: str) -> list[str]:  # the console script, else python -m
        exe = bindir / name
        return [str(exe)] if exe.is_file() else [py, "-m", "shearbatch", sub]

    return {
        "bias-stats --help": ([*script("bias-stats", "stats"), "--help"],
                              _help_of("bias_stats", "bias-stats")),
        "bias-extract --help": ([*script("bias-extract", "extract"), "--help"],
                                _help_of("bias_extract", "bias-extract")),
        "import shearbatch.cli.stats": ([py, "-c", "import shearbatch.cli.stats"],
                                        f"import shearbatch.cli.stats\n{_LOADED}\n"),
        "import jax (reference)": ([py, "-c", "import jax"], f"import jax\n{_LOADED}\n"),
    }  # fmt: skip


def _env(src: Path) -> dict[str, str]:
    """This environment with the source tree ``src`` first on ``PYTHONPATH``."""
    path = os.pathsep.join(p for p in (str(src), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path}


def timed(argv: list[str], env: dict[str, str]) -> float:
    """Wall seconds of one fresh process running ``argv`` (its output discarded)."""
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, cwd=h.ROOT, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)  # fmt: skip
    return time.perf_counter() - t0


def loaded(code: str, env: dict[str, str]) -> dict[str, bool]:
    """Whether ``code`` loaded JAX / a module under shearbatch/engine/ (one untimed run)."""
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=h.ROOT, check=True,
                         capture_output=True, text=True)  # fmt: skip
    line = [ln for ln in out.stderr.splitlines() if ln.startswith("LOADED ")][-1]
    jax, engine = line.split()[1:3]
    return {"loads_jax": jax == "True", "loads_engine": engine == "True"}


def summary(times: list[float], flags: dict[str, bool]) -> dict:
    return {"median_s": round(h.median(times), 3), "min_s": round(min(times), 3),
            "max_s": round(max(times), 3), "times_s": [round(t, 3) for t in times],
            **flags}  # fmt: skip


def draw(fig, rec: dict) -> None:
    """Median start-up per command (dots: each run), this tree and the baseline's, with
    the 1 s target."""
    ax = fig.subplots()
    labels = list(rec["commands"])
    trees = [("after", rec["commands"], "C0")]
    if rec.get("before"):
        trees.insert(0, ("before", rec["before"]["commands"], "C3"))
    width = 0.8 / len(trees)
    for k, (name, cmds, color) in enumerate(trees):
        x = [i + (k - (len(trees) - 1) / 2) * width for i in range(len(labels))]
        med = [cmds[lab]["median_s"] for lab in labels]
        tag = f" ({(rec['before'].get('commit') or '?')[:7]})" if name == "before" else ""
        ax.bar(x, med, width * 0.9, color=color, alpha=0.75, label=f"{name}{tag}, median")
        for xi, lab in zip(x, labels, strict=True):
            ts = cmds[lab]["times_s"]
            ax.scatter([xi] * len(ts), ts, color="k", s=8, zorder=3)
            if cmds[lab].get("loads_jax"):  # what it loaded, above its slowest run
                what = "JAX + engine" if cmds[lab].get("loads_engine") else "JAX"
                ax.annotate(what, (xi, max(ts)), ha="center", va="bottom", fontsize=7,
                            xytext=(0, 3), textcoords="offset points")  # fmt: skip
    ax.axhline(rec["target_s"], color="0.3", ls="--", lw=1,
               label=f"target for bias-stats --help ({rec['target_s']:g} s)")  # fmt: skip
    ax.set_xticks(range(len(labels)), labels, fontsize=8)
    ax.set_ylabel("wall seconds, fresh process")
    ax.set_title(f"start-up of stages 2 and 3 on {rec.get('cpu_model') or '?'} "
                 f"({rec['repeats']} runs each): bias-stats --help "
                 f"{rec['bias_stats_help_median_s']:.2f} s", fontsize=10)  # fmt: skip
    ax.legend(fontsize=8)


def _commit_of(src: Path) -> str | None:
    out = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True,
                         text=True, check=False)  # fmt: skip
    return out.stdout.strip() or None


def main(argv: list[str] | None = None) -> dict:
    ap = h.parser(__doc__, "import", repeats=7)
    ap.add_argument("--baseline-src", type=Path, default=None,
                    help="another source tree to time too (PYTHONPATH), e.g. the commit before")  # fmt: skip
    ap.add_argument("--warmup", type=int, default=1, help="untimed runs of each command first")
    args = ap.parse_args(argv)

    info = h.provenance(None)
    h.banner(info)
    cmds = commands()
    trees = {"after": _env(h.ROOT / "src")}
    if args.baseline_src is not None:
        trees["before"] = _env(args.baseline_src.resolve())
    times = {t: {lab: [] for lab in cmds} for t in trees}
    for _ in range(args.warmup):
        for env in trees.values():
            for argv_, _code in cmds.values():
                timed(argv_, env)
    table = h.Table([("tree", "7s"), ("command", "28s"), ("seconds", "8.3f"), ("load", "5.2f")])
    for _ in range(args.repeats):  # interleaved: each tree, each command, then again
        for tree, env in trees.items():
            for lab, (argv_, _code) in cmds.items():
                times[tree][lab].append(timed(argv_, env))
                table.row(tree, lab, times[tree][lab][-1], os.getloadavg()[0])
    result = {t: {lab: summary(times[t][lab], loaded(code, trees[t]))
                  for lab, (_argv, code) in cmds.items()} for t in trees}  # fmt: skip
    after = result["after"]
    stats_help = after["bias-stats --help"]["median_s"]
    res = {
        "benchmark": "start-up of stages 2 and 3 in a fresh process (bias-stats --help, "
                     "bias-extract --help, import shearbatch.cli.stats; import jax for reference)",
        "target_s": TARGET_S,
        "repeats": args.repeats,
        "bias_stats_help_median_s": stats_help,
        "passed": bool(stats_help < TARGET_S
                       and not any(after[lab]["loads_jax"] or after[lab]["loads_engine"]
                                   for lab in cmds if "reference" not in lab)),
        "commands": after,
        **info,
        "cpu_model": info.get("cpu_model"),
        "settings": h.settings(args),
    }  # fmt: skip
    if "before" in result:
        res["before"] = {"commit": _commit_of(args.baseline_src.resolve()),
                         "commands": result["before"]}  # fmt: skip
    print(f"bias-stats --help: median {stats_help:.3f} s (target < {TARGET_S:g} s)"
          + (f", before {result['before']['bias-stats --help']['median_s']:.3f} s"
             if "before" in result else ""))  # fmt: skip
    return h.write_json(res, args.out, draw=draw)


if __name__ == "__main__":
    main()
