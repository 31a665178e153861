"""A reproducible install: bounded dependencies, a tested constraints file that satisfies
them, and a ``make help`` that lists every target."""

import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]


def _requirements() -> list[Requirement]:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [Requirement(r) for r in meta["dependencies"]] + [
        Requirement(r) for r in meta["optional-dependencies"]["test"]
    ]


def _pins() -> dict[str, Version]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, ver = line.partition("==")
            assert ver, f"constraints.txt: not an exact pin: {line!r}"
            pins[canonicalize_name(name)] = Version(ver)
    return pins


def test_runtime_dependencies_have_upper_bounds():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for req in map(Requirement, meta["dependencies"]):
        assert any(s.operator in ("<", "<=") for s in req.specifier), f"{req}: no upper bound"


def test_constraints_pin_every_dependency_inside_its_bounds():
    pins = _pins()
    for req in _requirements():
        name = canonicalize_name(req.name)
        assert name in pins, f"constraints.txt does not pin {req.name}"
        assert req.specifier.contains(pins[name], prereleases=True), (
            f"constraints.txt pins {req.name}=={pins[name]} outside pyproject's {req.specifier}"
        )


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_help_lists_every_target():
    out = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout  # fmt: skip
    listed = set(re.findall(r"make (\S+)", out))
    targets = set(re.findall(r"^([a-z][a-z-]*):", (ROOT / "Makefile").read_text(), re.M))
    assert {"demo", "test", "help", "constraints"} <= listed
    assert listed == targets
