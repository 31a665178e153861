"""The newcomer's documents hold together: the quick start is two commands, every
relative link of README.md and results/README.md resolves (the index of every
published figure: tests/test_results_index.py)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _links(md: Path) -> list[Path]:
    targets = re.findall(r"\]\(([^)#\s]+)\)", md.read_text())
    return [md.parent / t for t in targets if not re.match(r"^[a-z]+:", t)]


def test_quick_start_is_exactly_two_commands():
    text = (ROOT / "README.md").read_text()
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    commands = [ln.strip() for ln in section.splitlines() if ln.startswith("    ")]
    assert [c.split("#")[0].strip() for c in commands] == ["make demo", "make test"]


def test_every_relative_link_resolves():
    for md in (ROOT / "README.md", ROOT / "results" / "README.md"):
        missing = [str(p.relative_to(ROOT)) for p in _links(md) if not p.exists()]
        assert not missing, f"{md.name}: broken links {missing}"


def test_every_benchmark_record_has_its_figure():
    for rec in (ROOT / "results" / "benchmarks").glob("*.json"):
        assert rec.with_suffix(".png").is_file(), f"{rec.name}: no PNG beside it"
