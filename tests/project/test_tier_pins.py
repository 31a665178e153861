"""The other environments' pins (issue 55) cannot drift from what they are derived from:
ci/constraints-min.txt is pyproject.toml's lower bounds, ci/constraints-gpu-image.txt the GPU
image's fixed versions plus constraints.txt; the image's versions lie inside pyproject's
bounds; both GPU extras name jax's extra of their CUDA major; every test of the versions
tier (Makefile's VERSIONS_TIER) exists. No network, no install (make test-min,
make test-gpu-image and make check-extras do those, in .ci/run)."""

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[2]


def _script(name: str):
    return load_script(f"ci/{name}.py")


def _pins(path: Path) -> dict[str, Version]:
    out = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, ver = line.partition("==")
            assert ver, f"{path.name}: not an exact pin: {line!r}"
            out[canonicalize_name(name)] = Version(ver)
    return out


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


@pytest.mark.parametrize("name", ["min_constraints", "gpu_image_constraints"])
def test_the_generated_pins_are_current(name):
    mod = _script(name)
    assert mod.OUT.read_text() == mod.render(), f"run python ci/{name}.py (or make constraints)"


def test_min_pins_are_the_lower_bounds_of_every_dependency():
    pins = _pins(ROOT / "ci" / "constraints-min.txt")
    for req in map(Requirement, _project()["dependencies"]):
        low = [s.version for s in req.specifier if s.operator == ">="]
        assert len(low) == 1, f"{req}: one >= lower bound needed"
        assert pins[canonicalize_name(req.name)] == Version(low[0]), req


def test_the_gpu_images_versions_are_inside_pyprojects_bounds():
    mod = _script("gpu_image_constraints")
    pins = _pins(ROOT / "ci" / "constraints-gpu-image.txt")
    reqs = {canonicalize_name(r.name): r for r in map(Requirement, _project()["dependencies"])}
    for name, ver in mod.IMAGE.items():
        assert pins[canonicalize_name(name)] == Version(ver)
        assert reqs[canonicalize_name(name)].specifier.contains(ver), (name, ver)
    tested = _pins(ROOT / "constraints.txt")
    for name, ver in pins.items():  # the rest: constraints.txt's versions
        if name not in {canonicalize_name(n) for n in mod.IMAGE}:
            assert tested[name] == ver, name


@pytest.mark.parametrize("major", ["12", "13"])
def test_each_cuda_extra_is_jax_with_its_plugin(major):
    (req,) = map(Requirement, _project()["optional-dependencies"][f"cuda{major}"])
    assert req.name == "jax" and req.extras == {f"cuda{major}"}
    jax = next(r for r in map(Requirement, _project()["dependencies"]) if r.name == "jax")
    upper = {str(s) for s in req.specifier if s.operator == "<"}
    assert upper == {str(s) for s in jax.specifier if s.operator == "<"}  # the same jax
    low = Version(next(s.version for s in req.specifier if s.operator == ">="))
    jax_low = Version(next(s.version for s in jax.specifier if s.operator == ">="))
    # jax gained the cuda13 extra (jax-cuda13-plugin) in 0.7.2
    assert low >= max(jax_low, Version("0.7.2") if major == "13" else jax_low)


def test_every_test_of_the_versions_tier_exists():
    text = (ROOT / "Makefile").read_text().replace("\\\n", " ")
    tier = re.search(r"^VERSIONS_TIER :=(.*)$", text, re.M).group(1).split()
    assert tier
    for node in tier:
        path, _, name = node.partition("::")
        assert (ROOT / path).is_file(), node
        if name:
            assert re.search(rf"^def {re.escape(name)}\(", (ROOT / path).read_text(), re.M), node
