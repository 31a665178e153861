"""The newcomer's documents hold together: README.md is a short front door whose quick
start is two commands; every relative link of README.md, the results indexes and the
documentation pages (docs/*.md, docs/results/*.md) resolves; and their code blocks
stay true: every bias-run / bias-extract / bias-stats flag they show exists, every
`make` target exists, every script they run is in the repository, every YAML block
parses. (The Python session of docs/api.md runs in tests/top/test_api.py, the index of
every published figure is checked in tests/project/test_results_index.py, and `make docs`
builds the site with warnings as errors.)"""

import re
import shlex
from pathlib import Path

import click
import pytest
import yaml

from shearbatch.cli import bias_extract, bias_run, bias_stats

ROOT = Path(__file__).resolve().parents[2]
PAGES = [
    ROOT / "README.md",
    ROOT / "results" / "README.md",
    *sorted((ROOT / "results").glob("*/README.md")),
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "docs" / "results").glob("*.md")),
]
COMMANDS = {"bias-run": bias_run, "bias-extract": bias_extract, "bias-stats": bias_stats}


def _links(md: Path) -> list[Path]:
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)\s]*)?\)", md.read_text())
    return [md.parent / t for t in targets if not re.match(r"^[a-z]+:", t)]


def blocks(md: Path, langs: tuple[str, ...]) -> list[str]:
    """The fenced code blocks of ``md`` in one of ``langs``."""
    found = re.findall(r"^```(\w*)[^\n]*\n(.*?)^```", md.read_text(), re.M | re.S)
    return [body for lang, body in found if lang in langs]


def command_lines(body: str) -> list[list[str]]:
    """Each command of a console block as argv (continuation lines joined, ``$ ``, output
    lines and comments dropped)."""
    out = []
    for line in body.replace("\\\n", " ").splitlines():
        line = line.strip().removeprefix("$ ")
        if not line or line.startswith("#") or not re.match(r"^[\w./-]+( |$)", line):
            continue
        try:
            argv = shlex.split(line, comments=True)
        except ValueError:
            continue
        out.append(argv)
    return out


def test_quick_start_is_exactly_two_commands():
    text = (ROOT / "README.md").read_text()
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    commands = [ln.strip() for ln in section.splitlines() if ln.startswith("    ")]
    assert [c.split("#")[0].strip() for c in commands] == ["make demo", "make test"]


def test_readme_is_a_front_door():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    for stage in COMMANDS:
        assert f"`{stage}`" in text
    for page in ("getting-started", "config", "slurm", "gpus", "statistics", "guarantees",
                 "api", "validation", "benchmarks", "design"):  # fmt: skip
        assert f"(docs/{page}.md)" in text, page


@pytest.mark.parametrize("md", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(md):
    missing = [str(p.relative_to(ROOT)) for p in _links(md) if not p.exists()]
    assert not missing, f"{md.name}: broken links {missing}"


def _options(cmd: click.Command) -> set[str]:
    return {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)}


@pytest.mark.parametrize("md", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_command_shown_exists_with_its_flags(md):
    make_targets = set(re.findall(r"^([a-z][\w-]*):", (ROOT / "Makefile").read_text(), re.M))
    for body in blocks(md, ("console", "bash", "shell", "")):
        for argv in command_lines(body):
            prog, args = argv[0].split("/")[-1], argv[1:]
            if prog in COMMANDS:
                flags = {a.split("=")[0] for a in args if a.startswith("--")}
                unknown = flags - _options(COMMANDS[prog])
                assert not unknown, f"{md.name}: {prog} has no {sorted(unknown)}"
            elif prog == "make":
                targets = [a for a in args if "=" not in a and not a.startswith("-")]
                assert set(targets) <= make_targets, f"{md.name}: make {targets}"
            elif prog.startswith("python") and args and args[0].endswith(".py"):
                assert (ROOT / args[0]).is_file(), f"{md.name}: no script {args[0]}"


@pytest.mark.parametrize("md", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_yaml_block_parses(md):
    for body in blocks(md, ("yaml",)):
        assert isinstance(yaml.safe_load(body), dict), f"{md.name}: {body[:60]}"


def test_the_site_lists_every_page():
    """Every docs/*.md is in a toctree of the site (Sphinx also refuses an orphan page
    under -W; this says which one without a build)."""
    text = "\n".join(p.read_text() for p in (ROOT / "docs").glob("*.md"))
    tocs = re.findall(r"```\{toctree\}(.*?)```", text, re.S)
    listed = {ln.strip() for t in tocs for ln in t.splitlines() if ln.strip()[:1].isalpha()}
    pages = {p.stem for p in (ROOT / "docs").glob("*.md")} - {"index"}
    assert pages <= listed, f"add to a toctree of docs/index.md: {pages - listed}"
    assert "results/*" in {ln.strip() for t in tocs for ln in t.splitlines()}


def test_every_benchmark_record_has_its_figure():
    for rec in (ROOT / "results" / "benchmarks").glob("*.json"):
        assert rec.with_suffix(".png").is_file(), f"{rec.name}: no PNG beside it"
