"""Every published figure and record under results/ is indexed with the script and the
commit that made it: results/benchmarks/README.md (speed, bench/) and
results/validation/README.md (science, the validation campaigns)."""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "results"
HEX = re.compile(r"`([0-9a-f]{7,40})`")


def rows(index: Path) -> list[dict[str, str]]:
    """The index's table, one dict per row keyed by the header's column names."""
    lines = [ln.strip() for ln in index.read_text().splitlines() if ln.strip().startswith("|")]
    cells = [[c.strip() for c in ln.strip("|").split("|")] for ln in lines]
    header, body = cells[0], [c for c in cells[2:]]
    assert all(len(c) == len(header) for c in body), index
    return [dict(zip(header, c, strict=True)) for c in body]


def scripts(cell: str) -> list[Path]:
    return [ROOT / s for s in re.findall(r"`((?:bench|results)/[\w/.-]+\.(?:py|sh))", cell)]


def recorded_commit(record: dict) -> str | None:
    git = record.get("git") or (record.get("info") or {}).get("git")
    return git.get("commit") if isinstance(git, dict) else git


@pytest.mark.parametrize("folder", ["benchmarks", "validation"])
def test_every_row_names_an_existing_script_and_a_commit(folder):
    table = rows(RESULTS / folder / "README.md")
    assert table
    for row in table:
        first = next(iter(row.values()))
        found = scripts(row["script"] if "script" in row else row["script (command)"])
        assert found and all(p.is_file() for p in found), (first, found)
        assert HEX.search(row["commit"]), (first, row["commit"])


def test_benchmark_index_covers_every_file_with_the_commit_its_json_records():
    folder = RESULTS / "benchmarks"
    table = rows(folder / "README.md")
    listed = {f for row in table for f in re.findall(r"\]\(([\w.]+)\)", row["writes"])}
    files = {p.name for p in folder.iterdir() if p.suffix in (".json", ".png")}
    assert files and files <= listed, f"not in results/benchmarks/README.md: {files - listed}"
    for row in table:
        (record,) = [f for f in re.findall(r"\]\(([\w.]+)\)", row["writes"]) if f.endswith("json")]
        commit = recorded_commit(json.loads((folder / record).read_text()))
        assert commit, f"{record}: no git commit recorded"
        assert commit.startswith(HEX.search(row["commit"]).group(1)), (record, commit)
        assert (folder / record).with_suffix(".png").is_file()


def test_validation_index_covers_every_figure_and_record():
    folder = RESULTS / "validation"
    table = rows(folder / "README.md")
    roots = [folder / m for row in table for m in re.findall(r"\]\(([\w./]+)\)", row["folder"])]
    assert all(r.exists() for r in roots), roots
    published = [p for p in folder.rglob("*") if p.suffix in (".png", ".json")]
    assert published
    orphans = [str(p.relative_to(ROOT)) for p in published
               if not any(p == r or r in p.parents for r in roots)]  # fmt: skip
    assert not orphans, f"add to results/validation/README.md: {orphans}"
    for row, root in zip(table, roots, strict=True):
        rec = root / "validation.json"
        if rec.is_file():  # the script recorded its commit: the index quotes it
            commit = recorded_commit(json.loads(rec.read_text()))
            assert commit and commit.startswith(HEX.search(row["commit"]).group(1)), row
        else:
            assert "(committed)" in row["commit"], row
