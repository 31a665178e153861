"""Fingerprint tiny campaigns, to show a refactor changed no output.

Runs four tiny campaigns through the real CLI (``bias-run`` -> ``bias-extract`` ->
``bias-stats --no-plots``) in a fresh directory: Level 0 (MAP), Level 2 (4 galaxies,
the population estimator), VI and NUTS (Level 0 stamps). It then writes one JSON
mapping every output file to a digest of what it means:

- JSON files (truth.json, convergence.json, campaign.json, bias_results.json, ...):
  the parsed document, with the fields that record *when* and *how long*
  (``created_at``, ``runtime_s``, timings, the code fingerprint) removed;
- netCDF files: every variable's values and attributes and every global attribute,
  the same volatile attributes removed;
- everything else (summary.csv, config.yaml, ...): its bytes.

Two fingerprints from two checkouts on the same machine are equal exactly when the
campaigns are the same realizations, numbers and checksums. Compare with
``--compare A.json B.json`` (exit 1 and the differing files when they differ).

    python ci/campaign_fingerprint.py --out /tmp/fp_before.json
    python ci/campaign_fingerprint.py --compare /tmp/fp_before.json /tmp/fp_after.json

Run with the checkout to fingerprint first on ``PYTHONPATH`` (``PYTHONPATH=src``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent

# Keys that say when or how long, or which code: not what was computed.
VOLATILE = {
    "created_at", "runtime_s", "code_commit", "code_version", "code_fingerprint",
    "code_dirty", "started_at", "finished_at", "wall_s", "timing", "timings",
    "compile_s", "elapsed_s", "hostname", "host", "pid", "verified_at",
    "extracted_at", "written_at", "duration_s", "seconds", "sampling_s",
    "per_realization_s", "batch_runtime_s", "last_verified",
}

CAMPAIGNS = {
    "level0_map": ("level0.yaml", ["--shear-grid", "-0.02", "0.02", "--n-realizations", "3"],
                   {"image.size_x": 24, "image.size_y": 24}),
    "level2_interim": ("level2.yaml", ["--n-realizations", "2"], {"image.n_objects": 4}),
    "level0_vi": ("level0.yaml", ["--shear-grid", "-0.02", "0.02", "--n-realizations", "2",
                                  "--method", "vi"],
                  {"image.size_x": 24, "image.size_y": 24,
                   "inference.vi_config": {"num_steps": 200, "num_samples": 100}}),
    "level0_nuts": ("level0.yaml", ["--shear-grid", "-0.02", "0.02", "--n-realizations", "2",
                                    "--method", "nuts"],
                    {"image.size_x": 24, "image.size_y": 24,
                     "inference.nuts_config": {"warmup": 150, "samples": 300, "chains": 2}}),
}


def _strip(doc):
    if isinstance(doc, dict):
        return {k: _strip(v) for k, v in sorted(doc.items()) if k not in VOLATILE}
    if isinstance(doc, list):
        return [_strip(v) for v in doc]
    return doc


def _digest_json(path: Path) -> str:
    doc = json.loads(path.read_text())
    return hashlib.sha256(json.dumps(_strip(doc), sort_keys=True).encode()).hexdigest()


def _digest_nc(path: Path) -> str:
    import netCDF4
    import numpy as np

    h = hashlib.sha256()

    def attrs(obj):
        for name in sorted(obj.ncattrs()):
            if name in VOLATILE:
                continue
            value = obj.getncattr(name)
            if isinstance(value, str) and value.startswith(("{", "[")):
                try:
                    value = json.dumps(_strip(json.loads(value)), sort_keys=True)
                except ValueError:
                    pass
            h.update(f"{name}={value!r}".encode())

    def walk(group):
        attrs(group)
        for name in sorted(group.variables):
            var = group.variables[name]
            var.set_auto_mask(False)
            h.update(f"var {name} {var.dimensions} {var.dtype}".encode())
            attrs(var)
            h.update(np.ascontiguousarray(var[...]).tobytes())
        for name in sorted(group.groups):
            h.update(f"group {name}".encode())
            walk(group.groups[name])

    with netCDF4.Dataset(path) as ds:
        walk(ds)
    return h.hexdigest()


def digest(path: Path) -> str:
    if path.suffix == ".json":
        return _digest_json(path)
    if path.suffix == ".nc":
        return _digest_nc(path)
    return hashlib.sha256(path.read_bytes()).hexdigest()


SKIP_SUFFIXES = {".log", ".lock", ".png", ".html"}
SKIP_PARTS = {"xla_cache", ".cache", "jax_cache", "__pycache__"}


def fingerprint_tree(root: Path) -> dict[str, str]:
    out = {}
    for path in sorted(root.rglob("*")):
        if not path.is_file() or path.suffix in SKIP_SUFFIXES:
            continue
        rel = path.relative_to(root)
        if SKIP_PARTS & set(rel.parts) or any(p.startswith(".") for p in rel.parts):
            continue
        out[str(rel)] = digest(path)
    return out


def _run(cmd: list[str], env: dict, ok: tuple[int, ...] = (0,)) -> None:
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode not in ok:
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")


def run_campaigns(work: Path, only: list[str] | None) -> dict[str, dict[str, str]]:
    env = dict(os.environ)
    env.setdefault("JAX_PLATFORMS", "cpu")
    env["SHEARBATCH_CACHE_DIR"] = str(work / "jax_cache")
    bindir = Path(sys.executable).parent
    result = {}
    for name, (base, flags, edits) in CAMPAIGNS.items():
        if only and name not in only:
            continue
        raw = yaml.safe_load((REPO / "configs" / base).read_text())
        for key, value in edits.items():
            node = raw
            *head, last = key.split(".")
            for k in head:
                node = node.setdefault(k, {})
            node[last] = value
        cfg = work / f"{name}.yaml"
        cfg.write_text(yaml.safe_dump(raw))
        root = work / name
        if (root / "stats" / "bias_results.json").is_file():  # --work of an earlier call
            result[name] = fingerprint_tree(root)
            continue
        if root.exists():
            raise SystemExit(f"{root} exists without stats/bias_results.json: remove it first")
        _run([str(bindir / "bias-run"), "--config", str(cfg), "--output-dir", str(root),
              *flags], env)
        _run([str(bindir / "bias-extract"), "--input-dir", str(root)], env)
        _run([str(bindir / "bias-stats"), "--input", str(root),
              "--output-dir", str(root / "stats"), "--no-plots"], env, ok=(0, 1, 3))
        result[name] = fingerprint_tree(root)
    return result


def compare(a_path: Path, b_path: Path) -> int:
    a, b = json.loads(a_path.read_text()), json.loads(b_path.read_text())
    differ = []
    for camp in sorted(set(a) | set(b)):
        fa, fb = a.get(camp, {}), b.get(camp, {})
        for f in sorted(set(fa) | set(fb)):
            if fa.get(f) != fb.get(f):
                differ.append(f"{camp}/{f}: {fa.get(f, 'absent')[:12]} != {fb.get(f, 'absent')[:12]}")
    n = sum(len(v) for v in a.values())
    if differ:
        print(f"{len(differ)} of {n} files differ:")
        print("\n".join(differ))
        return 1
    print(f"identical: {n} files in {len(a)} campaigns")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, help="write the fingerprint JSON here")
    p.add_argument("--work", type=Path, help="campaign directory (default: a temporary one); a campaign already there with its stats is fingerprinted, not run again")
    p.add_argument("--only", nargs="*", choices=sorted(CAMPAIGNS))
    p.add_argument("--compare", nargs=2, type=Path, metavar=("A", "B"))
    args = p.parse_args(argv)
    if args.compare:
        return compare(*args.compare)
    if args.out is None:
        p.error("--out is required (or --compare A B)")
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        fp = run_campaigns(work, args.only)
    args.out.write_text(json.dumps(fp, indent=1, sort_keys=True) + "\n")
    print(f"{sum(len(v) for v in fp.values())} files in {len(fp)} campaigns -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
