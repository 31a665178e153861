"""The table of issue 45's comparison in docs/validation.md, from the records that
``results/validation/anacal/run.sh`` (``bench/validate_anacal.py``) wrote: per campaign,
each estimator's m1, m2, c1, c2 with their jackknife errors, its verdict and cost, and the
difference AnaCal - forward model with its paired error (the estimators share the
realizations).

    .venv/bin/python bench/anacal_table.py [campaign ...]    (default: all, run.sh's order)
    .venv/bin/python bench/anacal_table.py --scan           (Level 0's cell size and shear scan)

``tests/project/test_figures.py`` renders the same rows from the records (:func:`rows`)
and finds them in docs/validation.md.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "results" / "validation" / "anacal"
CAMPAIGNS = ("level0", "level1", "level2_2d", "level2_snr1000", "control", "sersic2")
#: Level 0 again, one setting changed each: the cell (50 = the smallest allowed, 96, 128 px
#: against 64) or the shear grid (+-0.01, +-0.04 in each component against +-0.02)
SCAN = ("level0_cell50", "level0", "level0_cell96", "level0_cell128", "level0_g01",
        "level0_g04")  # fmt: skip
SCAN_HEAD = ("| campaign | cell (px) | shear grid | AnaCal m1 | AnaCal m2 |\n"
             "|---|---|---|---|---|")  # fmt: skip
HEAD = ("| campaign | estimator | m1 | m2 | c1 | c2 | verdict | galaxies/s |\n"
        "|---|---|---|---|---|---|---|---|")  # fmt: skip


def cell(v: float | None, e: float | None) -> str:
    """``+1.43e-03 ± 4.7e-03`` (``undefined`` without a value, e.g. m2 on a 1-D grid)."""
    return "undefined" if v is None or e is None else f"{v:+.2e} ± {e:.1e}"


def rows(record: dict[str, Any], name: str) -> list[str]:
    """The campaign's rows: each estimator, then each difference."""
    est = record["estimators"]
    out = []
    for key, r in est["results"].items():
        comps = " | ".join(cell(r.get(c), r.get(c + "_err")) for c in ("m1", "m2", "c1", "c2"))
        out.append(f"| {name} | {key} | {comps} | {r['verdict']} | "
                   f"{r['cost']['galaxies_per_s']:,.0f} |")  # fmt: skip
    for key, d in (est.get("differences") or {}).items():
        comps = " | ".join(cell(d.get("d" + c), d.get("d" + c + "_err"))
                           for c in ("m1", "m2", "c1", "c2"))  # fmt: skip
        out.append(f"| {name} | {key} | {comps} | (paired error) | |")
    return out


def scan_row(record: dict[str, Any], name: str) -> str:
    """One scan row: the cell and grid the campaign's bias-run was given, AnaCal's m."""
    run = record["stages"]["run"]
    sets = [run[i + 1] for i, a in enumerate(run) if a == "--set"]
    cell = next((int(v.split("=")[1]) for v in sets
                 if v.startswith("inference.anacal_config.cell_size=")), 64)  # fmt: skip
    g = float(run[run.index("--shear-grid") + 1])
    r = record["estimators"]["results"]["anacal"]
    return f"| {name} | {cell} | +-{abs(g):g} | {cell_(r, 'm1')} | {cell_(r, 'm2')} |"


def cell_(r: dict[str, Any], c: str) -> str:
    return cell(r.get(c), r.get(c + "_err"))


def main(argv: list[str]) -> None:
    if argv == ["--scan"]:
        print(SCAN_HEAD)
        for name in SCAN:
            print(scan_row(json.loads((FOLDER / name / "validation.json").read_text()), name))
        return
    print(HEAD)
    for name in argv or CAMPAIGNS:
        rec = json.loads((FOLDER / name / "validation.json").read_text())
        print("\n".join(rows(rec, name)))


if __name__ == "__main__":
    main(sys.argv[1:])
