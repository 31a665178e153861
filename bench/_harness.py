"""Shared benchmark harness: arguments, provenance, timing, JSON output, tables.

Every ``bench/bench_*.py`` script uses it:

- :func:`parser`: an ``argparse`` parser with the common ``--out`` (default
  ``results/benchmarks/<name>.json``) and ``--repeats``; :func:`add_x64` adds
  ``--no-x64``.
- :func:`configure`: JAX's x64 flag, set by ``main()`` (never at import, so a test
  may import and run a benchmark in-process).
- :func:`provenance`: JAX / NumPyro / Python versions, platform, device, CPU count,
  dtype, git commit of HEAD and the locally modified files, load average.
- :func:`compile_aot`, :func:`time_calls`, :func:`median`: compile time
  (``lower().compile()``) and wall times of repeated calls, each ended with
  ``block_until_ready``; figures are medians because the machine is shared.
- :func:`write_json`: adds the end load average and total runtime, refuses any
  absolute path in the record (paths are written relative to the repository root),
  writes the JSON and, given the script's ``draw(fig, res)``, the PNG beside it
  (:func:`write_png`, provenance in its footer); :class:`Table` prints rows as they come.

Redraw a committed record's figure without re-running it::

    python bench/_harness.py replot results/benchmarks/map.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "results" / "benchmarks"
_T0 = time.perf_counter()


# --------------------------------------------------------------------------- arguments


def parser(doc: str, name: str, repeats: int) -> argparse.ArgumentParser:
    """Parser described by ``doc`` (the script's docstring) with ``--out`` and ``--repeats``."""
    ap = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--out", type=Path, default=RESULTS / f"{name}.json", help="JSON to write")
    ap.add_argument("--repeats", type=int, default=repeats, help="timed calls (median reported)")
    return ap


def add_x64(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--no-x64", dest="x64", action="store_false", help="float32 (default 64)")


def configure(x64: bool) -> None:
    """Set JAX's x64 flag; no persistent compilation cache is configured here, so a
    script's compile times are real (a caller that configured one, e.g. the tests, keeps it)."""
    import jax

    jax.config.update("jax_enable_x64", bool(x64))


def settings(args: argparse.Namespace) -> dict[str, Any]:
    """The parsed arguments, JSON-ready (paths relative to the repository root)."""
    return {k: rel(v) if isinstance(v, Path) else v for k, v in vars(args).items()}


# --------------------------------------------------------------------------- provenance


def rel(path: str | Path) -> str:
    """``path`` relative to the repository root; outside it, its name only."""
    p = Path(path).resolve()
    return str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else p.name


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout


def git_state() -> dict[str, Any]:
    """HEAD's commit and the tracked files modified in the working tree (read-only git)."""
    dirty = _git("status", "--porcelain", "--untracked-files=no")
    commit = _git("rev-parse", "HEAD")
    return {
        "commit": commit.strip() if commit else None,
        "modified": [ln[3:] for ln in dirty.splitlines() if ln.strip()] if dirty else [],
    }


def cpu_model() -> str | None:
    """The CPU's model name (``/proc/cpuinfo``; rates differ 2x between our machines)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def provenance(dtype: str | None = None) -> dict[str, Any]:
    """Machine and software record of a run (no paths); starts the run's clock."""
    import jax

    global _T0
    _T0 = time.perf_counter()
    try:
        import numpyro

        npv = numpyro.__version__
    except ImportError:  # pragma: no cover - numpyro is a dependency
        npv = None
    dev = jax.devices()[0]
    return {
        "jax": jax.__version__,
        "numpyro": npv,
        "python": platform.python_version(),
        "platform": dev.platform,
        "device": dev.device_kind,
        "devices": [str(d) for d in jax.devices()],
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "cpu_model": cpu_model(),
        "dtype": dtype,
        "git": git_state(),
        "load_average_start": list(os.getloadavg()),
    }


def banner(info: dict[str, Any]) -> None:
    print(
        f"JAX {info['jax']} on {info['platform']} ({info['device']}), {info['cpu_count']} CPUs, "
        f"{info['dtype'] or 'mixed dtypes'}, load {info['load_average_start'][0]:.2f} "
        f"(a shared machine: figures are medians)",
        flush=True,
    )


# --------------------------------------------------------------------------- timing


def median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs))


def compile_aot(jitted, *args) -> tuple[Any, float]:
    """``(compiled, seconds)`` of ``jitted.lower(*args).compile()``."""
    t0 = time.perf_counter()
    compiled = jitted.lower(*args).compile()
    return compiled, time.perf_counter() - t0


def time_calls(fn: Callable, args: Sequence, repeats: int, warm: bool = True):
    """``(first_s, [wall_s] * repeats, last result)``; each call ends with
    ``block_until_ready``. ``warm``: one untimed-in-the-list first call (compile)."""
    import jax

    first, res = None, None
    if warm:
        t0 = time.perf_counter()
        res = jax.block_until_ready(fn(*args))
        first = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        res = jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    return first, times, res


# --------------------------------------------------------------------------- output


def _check_paths(obj: Any, where: str = "") -> None:
    if isinstance(obj, dict):
        for k, v in obj.items():
            _check_paths(v, f"{where}.{k}")
    elif isinstance(obj, list | tuple):
        for i, v in enumerate(obj):
            _check_paths(v, f"{where}[{i}]")
    elif isinstance(obj, Path) or (isinstance(obj, str) and os.path.isabs(obj) and "/" in obj):
        raise ValueError(f"absolute path in the benchmark record at {where or '.'}: {obj}")


def write_json(
    res: dict[str, Any], out: Path, draw: Callable[[Any, dict[str, Any]], None] | None = None
) -> dict[str, Any]:
    """Add the end load average and total runtime, check for paths, write ``out``; with
    ``draw``, also the figure beside it (:func:`write_png`)."""
    res["load_average_end"] = list(os.getloadavg())
    res.setdefault("total_runtime_s", time.perf_counter() - _T0)
    _check_paths(res)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2) + "\n")
    print(f"wrote {rel(out)} (load average end {res['load_average_end'][0]:.2f})")
    if draw is not None:
        write_png(res, out, draw)
    return res


def footer(res: dict[str, Any]) -> str:
    """One line of provenance for a figure: commit, machine, versions, load (at the top
    level of the record, or under ``info``)."""
    res = res.get("info", res)
    git = res.get("git") or {}
    commit = (git.get("commit") or "unknown")[:10]
    dirty = f" + {len(git['modified'])} modified file(s)" if git.get("modified") else ""
    load = res.get("load_average_start") or [float("nan")]
    return (f"commit {commit}{dirty}; {res.get('machine', '?')} {res.get('platform', '?')} "
            f"({res.get('device', '?')}), {res.get('cpu_count', '?')} CPUs; jax "
            f"{res.get('jax', '?')}; load average at start {load[0]:.1f} (shared machine: "
            f"medians)")  # fmt: skip


def write_png(res: dict[str, Any], out: Path, draw: Callable[[Any, dict[str, Any]], None]) -> Path:
    """The figure of a benchmark record beside its JSON (``<name>.png``).

    ``draw(fig, res)`` makes the panels from the record alone (so ``python
    bench/_harness.py replot results/benchmarks/<name>.json`` can redraw a committed
    record without re-running it); the footer records commit, machine and load.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4.6), layout="constrained")
    FigureCanvasAgg(fig)
    draw(fig, res)
    fig.text(0.01, 0.002, footer(res), fontsize=7, color="0.35", ha="left", va="bottom")
    fig.get_layout_engine().set(h_pad=0.25)
    png = Path(out).with_suffix(".png")
    fig.savefig(png, dpi=100)
    print(f"wrote {rel(png)}")
    return png


def replot(json_path: str | Path) -> Path:
    """Redraw ``results/benchmarks/<name>.png`` from its JSON with ``bench_<name>.draw``."""
    import importlib
    import sys

    path = Path(json_path)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    module = importlib.import_module(f"bench_{path.stem}")
    return write_png(json.loads(path.read_text()), path, module.draw)


class Table:
    """Rows printed as they come under one header: ``columns`` = [(title, format spec)]
    with a width first (``"7.1f"``, ``"11s"``); a ``None`` cell prints as ``-``."""

    def __init__(self, columns: Sequence[tuple[str, str]], note: str = ""):
        self.columns = list(columns)
        print(" ".join(self._cell(t, f, title=True) for t, f in self.columns))
        if note:
            print(note)

    @staticmethod
    def _cell(v: Any, f: str, title: bool = False) -> str:
        width = int(f.split(".")[0].rstrip("sdfeg%") or 0)
        if title or v is None:
            return f"{'-' if v is None else v:{'<' if f.endswith('s') else '>'}{width}}"
        return format(v, f)

    def row(self, *values: Any) -> None:
        cols = zip(self.columns, values, strict=True)
        print(" ".join(self._cell(v, f) for (_, f), v in cols), flush=True)


if __name__ == "__main__":
    import sys

    if len(sys.argv) < 3 or sys.argv[1] != "replot":
        sys.exit("usage: python bench/_harness.py replot results/benchmarks/<name>.json ...")
    for arg in sys.argv[2:]:
        replot(arg)
