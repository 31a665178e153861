"""Fingerprint tiny campaigns, to show a refactor changed no output.

Runs four tiny campaigns through the real CLI (``bias-run`` -> ``bias-extract`` ->
``bias-stats --no-plots``) in a fresh directory: Level 0 (MAP), Level 2 (4 galaxies,
the population estimator), VI and NUTS (Level 0 stamps). It then writes one JSON
mapping every output file to a digest of what it means:

- JSON files (truth.json, convergence.json, campaign.json, bias_results.json, ...):
  the parsed document, with the fields that record *when*, *how long* and *which code*
  (``created_at``, ``runtime_s``, timings, ``code``) removed, and the byte checksums of
  files that hold them (the files' content is compared instead);
- netCDF files: every variable's values and attributes and every global attribute,
  the same volatile attributes removed;
- summary.csv: every cell but those columns (runtime, code commit and fingerprint);
- everything else (config.yaml, ...): its bytes.
The path of the campaign directory is replaced by a placeholder everywhere; logs
(commands.txt), figures, the report and extraction's caches (partials/) are left out.

Two fingerprints from two checkouts on the same machine are equal exactly when the
campaigns are the same realizations, numbers and checksums. Compare with
``--compare A.json B.json`` (exit 1 and the differing files when they differ), and see
where inside each file two ``--work`` directories differ with ``--diff-trees A B``.

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
    "created_at",
    "runtime_s",
    "code_commit",
    "code_version",
    "code_fingerprint",
    "code_dirty",
    "started_at",
    "finished_at",
    "wall_s",
    "timing",
    "timings",
    "compile_s",
    "elapsed_s",
    "hostname",
    "host",
    "pid",
    "verified_at",
    "extracted_at",
    "written_at",
    "duration_s",
    "seconds",
    "sampling_s",
    "per_realization_s",
    "batch_runtime_s",
    "last_verified",
    # the code that ran (commit, dirty flag, fingerprint), and the byte checksums of files
    # holding it and the times: their content is compared here instead
    "code",
    "checksums",
}

CAMPAIGNS = {
    "level0_map": (
        "level0.yaml",
        ["--shear-grid", "-0.02", "0.02", "--n-realizations", "3"],
        {"image.size_x": 24, "image.size_y": 24},
    ),
    "level2_interim": ("level2.yaml", ["--n-realizations", "2"], {"image.n_objects": 4}),
    "level0_vi": (
        "level0.yaml",
        ["--shear-grid", "-0.02", "0.02", "--n-realizations", "2", "--method", "vi"],
        {
            "image.size_x": 24,
            "image.size_y": 24,
            "inference.vi_config": {"num_steps": 200, "num_samples": 100},
        },
    ),
    "level0_nuts": (
        "level0.yaml",
        ["--shear-grid", "-0.02", "0.02", "--n-realizations", "2", "--method", "nuts"],
        {
            "image.size_x": 24,
            "image.size_y": 24,
            "inference.nuts_config": {"warmup": 150, "samples": 300, "chains": 2},
        },
    ),
}


#: summary.csv columns that say when, how long or which code
VOLATILE_COLUMNS = {"runtime_s", "code_commit", "code_dirty", "code_fingerprint",
                    "anacal_cost_s"}  # fmt: skip
WORK = "<WORK>"  # the campaign directory's path, wherever it was run


def _strip(doc, work: str):
    if isinstance(doc, dict):
        return {k: _strip(v, work) for k, v in sorted(doc.items()) if k not in VOLATILE}
    if isinstance(doc, list):
        return [_strip(v, work) for v in doc]
    if isinstance(doc, str):
        return doc.replace(work, WORK)
    return doc


def _normal_nc(path: Path, work: str) -> dict:
    import netCDF4
    import numpy as np

    def attrs(obj):
        out = {}
        for name in sorted(obj.ncattrs()):
            if name in VOLATILE:
                continue
            value = obj.getncattr(name)
            if isinstance(value, str):
                try:
                    value = _strip(json.loads(value), work)
                except ValueError:
                    value = value.replace(work, WORK)
            elif isinstance(value, np.ndarray):
                value = value.tolist()
            elif isinstance(value, np.generic):
                value = value.item()
            out[name] = value
        return out

    def walk(group):
        node = {"attrs": attrs(group), "vars": {}, "groups": {}}
        for name in sorted(group.variables):
            var = group.variables[name]
            var.set_auto_mask(False)
            data = np.ascontiguousarray(var[...])
            if data.dtype == object:  # strings
                data = np.asarray([str(x).replace(work, WORK) for x in data.ravel()])
            node["vars"][name] = {
                "dims": list(var.dimensions),
                "dtype": str(var.dtype),
                "attrs": attrs(var),
                "sha256": hashlib.sha256(data.tobytes()).hexdigest(),
            }
        for name in sorted(group.groups):
            node["groups"][name] = walk(group.groups[name])
        return node

    with netCDF4.Dataset(path) as ds:
        return walk(ds)


def _normal_csv(path: Path, work: str) -> dict:
    import csv

    with path.open(newline="") as f:
        rows = list(csv.reader(f))
    keep = [i for i, c in enumerate(rows[0]) if c not in VOLATILE_COLUMNS] if rows else []
    return {"rows": [[r[i].replace(work, WORK) for i in keep if i < len(r)] for r in rows]}


def normal(path: Path, work: str):
    """What a file means, without the fields that say when, how long, which code or where
    it was run: parsed JSON, netCDF variables (digests) and attributes, CSV cells; other
    files as the digest of their bytes."""
    if path.suffix == ".json":
        return _strip(json.loads(path.read_text()), work)
    if path.suffix == ".nc":
        return _normal_nc(path, work)
    if path.suffix == ".csv":
        return _normal_csv(path, work)
    data = path.read_bytes().replace(work.encode(), WORK.encode())
    return {"sha256": hashlib.sha256(data).hexdigest()}


def digest(path: Path, work: str) -> str:
    return hashlib.sha256(json.dumps(normal(path, work), sort_keys=True).encode()).hexdigest()


#: files that are logs of the run (times, paths, pids), not its results; partials and
#: their index record file sizes and mtimes (their content is the summary's)
SKIP_SUFFIXES = {".log", ".lock", ".png", ".html"}
SKIP_NAMES = {"commands.txt", "summary.partials.json"}
SKIP_PARTS = {"xla_cache", ".cache", "jax_cache", "__pycache__", "partials"}


def fingerprint_tree(root: Path) -> dict[str, str]:
    out = {}
    for path in sorted(root.rglob("*")):
        if not path.is_file() or path.suffix in SKIP_SUFFIXES or path.name in SKIP_NAMES:
            continue
        rel = path.relative_to(root)
        if SKIP_PARTS & set(rel.parts) or any(p.startswith(".") for p in rel.parts):
            continue
        out[str(rel)] = digest(path, str(root.parent))
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
        _run(
            [str(bindir / "bias-run"), "--config", str(cfg), "--output-dir", str(root), *flags], env
        )
        _run([str(bindir / "bias-extract"), "--input-dir", str(root)], env)
        _run(
            [
                str(bindir / "bias-stats"),
                "--input",
                str(root),
                "--output-dir",
                str(root / "stats"),
                "--no-plots",
            ],
            env,
            ok=(0, 1, 3),
        )
        result[name] = fingerprint_tree(root)
    return result


def compare(a_path: Path, b_path: Path) -> int:
    a, b = json.loads(a_path.read_text()), json.loads(b_path.read_text())
    differ = []
    for camp in sorted(set(a) | set(b)):
        fa, fb = a.get(camp, {}), b.get(camp, {})
        for f in sorted(set(fa) | set(fb)):
            if fa.get(f) != fb.get(f):
                differ.append(
                    f"{camp}/{f}: {fa.get(f, 'absent')[:12]} != {fb.get(f, 'absent')[:12]}"
                )
    n = sum(len(v) for v in a.values())
    if differ:
        print(f"{len(differ)} of {n} files differ:")
        print("\n".join(differ))
        return 1
    print(f"identical: {n} files in {len(a)} campaigns")
    return 0


def _where_differ(a, b, at: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b), key=str):
            out += _where_differ(a.get(k, "<absent>"), b.get(k, "<absent>"), f"{at}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [
            x
            for i, (u, v) in enumerate(zip(a, b, strict=True))
            for x in _where_differ(u, v, f"{at}[{i}]")
        ]
    return [] if a == b else [f"{at}: {str(a)[:60]!r} != {str(b)[:60]!r}"]


def diff_trees(a_work: Path, b_work: Path) -> int:
    """Which files of two --work directories differ, and where inside each."""
    n_diff = 0
    for camp in sorted(p.name for p in a_work.iterdir() if (p / "stats").is_dir()):
        fa, fb = fingerprint_tree(a_work / camp), fingerprint_tree(b_work / camp)
        for f in sorted(set(fa) | set(fb)):
            if fa.get(f) == fb.get(f):
                continue
            n_diff += 1
            if f not in fa or f not in fb:
                print(f"{camp}/{f}: only in {'B' if f not in fa else 'A'}")
                continue
            where = _where_differ(normal(a_work / camp / f, str(a_work)),
                                  normal(b_work / camp / f, str(b_work)))  # fmt: skip
            print(f"{camp}/{f}: " + "; ".join(where[:4]) + (" ..." if len(where) > 4 else ""))
    print("identical" if not n_diff else f"{n_diff} file(s) differ")
    return 1 if n_diff else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, help="write the fingerprint JSON here")
    p.add_argument(
        "--work",
        type=Path,
        help="campaign directory (default: a temporary one); a campaign already there with its stats is fingerprinted, not run again",
    )
    p.add_argument("--only", nargs="*", choices=sorted(CAMPAIGNS))
    p.add_argument(
        "--compare",
        nargs=2,
        type=Path,
        metavar=("A", "B"),
        help="compare two fingerprint JSON files",
    )
    p.add_argument(
        "--diff-trees",
        nargs=2,
        type=Path,
        metavar=("A", "B"),
        help="two --work directories: which files differ and where inside each",
    )
    args = p.parse_args(argv)
    if args.compare:
        return compare(*args.compare)
    if args.diff_trees:
        return diff_trees(*args.diff_trees)
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
