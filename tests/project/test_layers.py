"""The layers point one way: the CLI calls the application layer (shearbatch.app), which
never imports the CLI (nor click); neither does the Python API. Read from the source (ast),
deferred imports inside functions included, so a late ``from ..cli import ...`` is caught."""

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "src" / "shearbatch"


def imported_modules(source: str, package: list[str]) -> set[str]:
    """Every module ``source`` (a module of ``package``) imports, anywhere in it, as
    absolute dotted names (``from .. import cli`` gives ``shearbatch`` and ``shearbatch.cli``)."""
    out = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            mod = ".".join([*base, *(node.module.split(".") if node.module else [])])
            out |= {mod, *(f"{mod}.{a.name}" for a in node.names)}
    return out


def modules_of(path: Path) -> set[str]:
    package = list(path.relative_to(PKG.parent).parts[:-1])
    return imported_modules(path.read_text(), package)


def forbidden(mods: set[str]) -> list[str]:
    return sorted(m for m in mods if m in ("shearbatch.cli", "click")
                  or m.startswith(("shearbatch.cli.", "click.")))  # fmt: skip


def test_the_check_sees_relative_and_deferred_imports():
    """The check itself can fail: deferred, relative imports of the CLI are found."""
    src = "def f():\n    from ..cli import bias_run\n    from .. import cli\n    import click\n"
    found = forbidden(imported_modules(src, ["shearbatch", "app"]))
    assert found == ["click", "shearbatch.cli", "shearbatch.cli.bias_run"]
    runner = modules_of(PKG / "app" / "runner.py")
    assert {"shearbatch.engine", "shearbatch.engine.runtime", "shearbatch.app.plan"} <= runner


@pytest.mark.parametrize(
    "path",
    [PKG / "api.py", *sorted((PKG / "app").glob("*.py"))],
    ids=lambda p: str(p.relative_to(PKG)),
)
def test_api_and_app_do_not_import_the_cli(path):
    bad = forbidden(modules_of(path))
    assert not bad, f"{path.relative_to(PKG)} imports {bad}"


def test_cli_modules_stay_small():
    """Each command's module only parses, calls shearbatch.app, prints and maps errors, and
    every CLI module (bias-run's options split by group) is under 200 lines."""
    sizes = {p.name: len(p.read_text().splitlines()) for p in (PKG / "cli").glob("*.py")}
    assert sizes and max(sizes.values()) < 200, sizes


@pytest.mark.parametrize("name", ["extract.py", "stats.py"])
def test_stage_2_and_3_commands_reach_only_the_application_layer(name):
    """bias-extract and bias-stats import nothing of the package below shearbatch.app: the
    analysis, the files and the schema are the application layer's to call."""
    mods = modules_of(PKG / "cli" / name)
    below = sorted(m for m in mods if m.startswith("shearbatch.")
                   and not m.startswith(("shearbatch.app", "shearbatch.cli")))  # fmt: skip
    assert not below, f"cli/{name} imports {below}"


LAYER = {"cli": 4, "app": 3, "api": 3, "analysis": 2, "engine": 2}  # the rest (core, io...): 1


def _layer(module: str) -> int | None:
    parts = module.split(".")
    if parts[0] != "shearbatch" or len(parts) < 2:
        return None
    return LAYER.get(parts[1], 1)


def crossings(cmd, args) -> list[tuple[str, str, str]]:
    """Run a click command under a profiler: every call from one shearbatch function into
    another that goes back up the layers (``up``) or from the CLI past the application
    layer (``skip``), as ``(kind, caller, callee)``."""
    import sys

    from click.testing import CliRunner

    found = []

    def prof(frame, event, arg):
        if event != "call" or frame.f_back is None:
            return
        callee = _layer(frame.f_globals.get("__name__", ""))
        caller = _layer(frame.f_back.f_globals.get("__name__", ""))
        if callee is None or caller is None:
            return
        if callee > caller or (caller == 4 and callee <= 2):
            found.append(("up" if callee > caller else "skip",
                          f"{frame.f_back.f_globals['__name__']}.{frame.f_back.f_code.co_name}",
                          f"{frame.f_globals['__name__']}.{frame.f_code.co_name}"))  # fmt: skip

    sys.setprofile(prof)
    try:
        res = CliRunner().invoke(cmd, [str(a) for a in args])
    finally:
        sys.setprofile(None)
    assert res.exit_code in (0, 1, 3), res.output
    return found


def test_a_stats_run_goes_down_the_layers(tmp_path):
    """bias-stats on a summary table, followed from the command to bias_results.json: no
    call climbs back up (core/io/analysis into app/cli), none skips the application layer
    (before issue 35: 6 calls from cli/stats.py into analysis, io and schema)."""
    import numpy as np
    import pandas as pd

    from shearbatch.cli import bias_stats

    rng = np.random.default_rng(0)
    rows = [{"run_id": f"r{s}_{g1}_{g2}", "seed": s, "g1_true": g1, "g2_true": g2,
             "g1_mean": g1 + rng.normal(0, 1e-3), "g2_mean": g2 + rng.normal(0, 1e-3),
             "g1_std": 1e-3, "g2_std": 1e-3, "status": "ok", "passed_convergence": True}
            for s in range(5) for g1 in (-0.02, 0.02) for g2 in (-0.02, 0.02)]  # fmt: skip
    pd.DataFrame(rows).to_csv(tmp_path / "summary.csv", index=False)
    out = tmp_path / "stats"
    assert crossings(bias_stats, ["--input", tmp_path / "summary.csv", "--output-dir", out,
                                  "--no-plots", "--report", out / "report.html"]) == []  # fmt: skip
    assert (out / "bias_results.json").is_file() and (out / "report.html").is_file()


def test_stage_2_and_3_entry_points_import_no_jax():
    """The console scripts of stages 2 and 3 (``shearbatch.cli:bias_extract`` and
    ``:bias_stats``), asked for their help, and the API's modules load no JAX and nothing
    under shearbatch/engine/ (issue 57: cli/__init__ -> app/runner -> engine -> JAX). In a
    fresh interpreter (~1 s); tests/top/test_api_cli_agreement.py runs the stages too."""
    import json
    import subprocess
    import sys

    code = (
        "import json, sys\n"
        "import shearbatch.api, shearbatch.app, shearbatch.cli.extract, shearbatch.cli.stats\n"
        "from shearbatch.cli import bias_extract, bias_stats\n"
        "for cmd in (bias_extract, bias_stats):\n"
        "    try:\n"
        "        cmd.main(args=['--help'], prog_name=cmd.name)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "print(json.dumps(sorted({m.split('.')[0] if not m.startswith('shearbatch') else m\n"
        "                         for m in sys.modules if m.split('.')[0] in\n"
        "                         ('jax', 'jaxlib', 'numpyro', 'optax')\n"
        "                         or m.startswith('shearbatch.engine')})))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=False)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert "Usage: bias-extract" in out.stdout and "Usage: bias-stats" in out.stdout
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert loaded == [], f"stage 2 / 3 entry points loaded {loaded}"
