"""The table of issue 45's comparison in docs/validation.md, from the records that
``results/validation/anacal/run.sh`` (``bench/validate_anacal.py``) wrote: per campaign,
each estimator's m1, m2, c1, c2 with their jackknife errors, its verdict and cost, and the
difference AnaCal - forward model with its paired error (the estimators share the
realizations).

    .venv/bin/python bench/anacal_table.py [campaign ...]    (default: all, run.sh's order)

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


def main(argv: list[str]) -> None:
    print(HEAD)
    for name in argv or CAMPAIGNS:
        rec = json.loads((FOLDER / name / "validation.json").read_text())
        print("\n".join(rows(rec, name)))


if __name__ == "__main__":
    main(sys.argv[1:])
