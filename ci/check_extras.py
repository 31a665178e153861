"""Check that the GPU extras resolve, without a GPU: pip's resolver on ``.[cuda12]`` and
``.[cuda13]`` (``pip install --dry-run --ignore-installed --report``), nothing installed.

For each extra, the report must hold jax, jaxlib and jax's CUDA plugin for that CUDA major
(``jax-cuda12-plugin`` / ``jax-cuda13-plugin``) at one version, and NVIDIA's CUDA wheels
(the extras ask for ``[with-cuda]``). pip decides by platform tags, not by the hardware, so
this runs on any Linux x86_64 machine; it needs the package index (PyPI: the CUDA wheels are
not mirrored here), so it is a step of .ci/run (``make check-extras``), not a unit test.

    python ci/check_extras.py [--python PY] [-c CONSTRAINTS] EXTRA [EXTRA ...]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def resolve(python: str, extra: str, constraints: str | None) -> dict[str, str]:
    """{name: version} that pip would install for ``.[extra]`` (raises on a failed resolve)."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        cmd = [python, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
               "--report", str(report), f".[{extra}]"]  # fmt: skip
        if constraints:
            cmd[4:4] = ["-c", constraints]
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        if proc.returncode != 0 or not report.is_file():
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
            raise SystemExit(f"{extra}: pip could not resolve it ({' '.join(cmd)}):\n{tail}")
        items = json.loads(report.read_text())["install"]
    return {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in items}


def check(got: dict[str, str], extra: str) -> list[str]:
    """What is wrong with the resolve of ``extra`` (cuda12 / cuda13): empty when nothing."""
    major = extra.removeprefix("cuda")
    plugin = f"jax-cuda{major}-plugin"
    errors = [f"{extra}: {name} not in the resolve" for name in ("jax", "jaxlib", plugin)
              if name not in got]  # fmt: skip
    if not errors and not got["jax"] == got["jaxlib"] == got[plugin]:
        errors.append(f"{extra}: jax {got['jax']}, jaxlib {got['jaxlib']} and {plugin} "
                      f"{got[plugin]} differ")  # fmt: skip
    if not any(n.startswith("nvidia-") for n in got):
        errors.append(f"{extra}: no NVIDIA CUDA wheels in the resolve")
    return errors


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--python", default=sys.executable, help="whose pip resolves (its Python)")
    p.add_argument("-c", "--constraints", help="a constraints file, as make installs with")
    p.add_argument("extras", nargs="+", choices=["cuda12", "cuda13"])
    args = p.parse_args(argv)
    version = subprocess.run([args.python, "-c", "import sys; print(sys.version.split()[0])"],
                             capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    errors = []
    for extra in args.extras:
        t0 = time.monotonic()
        got = resolve(args.python, extra, args.constraints)
        errors += check(got, extra)
        plugin = f"jax-cuda{extra.removeprefix('cuda')}-plugin"
        n_nv = sum(n.startswith("nvidia-") for n in got)
        sys.stdout.write(f"[{extra}] Python {version}, constraints {args.constraints or 'none'}: "
                         f"jax {got.get('jax')}, jaxlib {got.get('jaxlib')}, {plugin} "
                         f"{got.get(plugin)}, {n_nv} nvidia-* wheels, {len(got)} packages in "
                         f"all ({time.monotonic() - t0:.0f} s)\n")  # fmt: skip
    for e in errors:
        sys.stderr.write(e + "\n")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
