"""``python -m shearbatch run|extract|stats``: the console scripts where they are not
installed (a GPU node with the package on PYTHONPATH): ``run --help`` and a wrong
subcommand through a real subprocess, the other subcommands in this process."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from shearbatch.__main__ import main

SRC = Path(__file__).resolve().parents[2] / "src"


def module(*args: str) -> subprocess.CompletedProcess:
    path = [str(SRC), *filter(None, [os.environ.get("PYTHONPATH")])]
    return subprocess.run([sys.executable, "-m", "shearbatch", *args], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(path)},
                          timeout=120, check=False)  # fmt: skip


def test_python_m_shearbatch_run_is_bias_run():
    res = module("run", "--help")
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("Usage: bias-run [OPTIONS]") and "--batch-size" in res.stdout


def test_unknown_subcommand_exits_2_with_one_line():
    res = module("frobnicate", "--config", "x.yaml")
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.count("\n") == 1 and res.stderr.startswith("Error: no command 'frobnicate'")
    assert "run|extract|stats" in res.stderr
    res = module()  # no subcommand: the usage, exit 2
    assert res.returncode == 2 and "python -m shearbatch {run,extract,stats}" in res.stderr


@pytest.mark.parametrize(("sub", "prog", "option"), [
    ("extract", "bias-extract", "--input-dir"), ("stats", "bias-stats", "--acceptance-config"),
    ("bias-run", "bias-run", "--shear-grid"),
])  # fmt: skip
def test_each_subcommand_is_its_console_script(sub, prog, option, capsys):
    with pytest.raises(SystemExit) as exc:
        main([sub, "--help"])
    out = capsys.readouterr().out
    assert exc.value.code == 0 and out.startswith(f"Usage: {prog} [OPTIONS]") and option in out


def test_help_exits_0_and_a_usage_error_keeps_its_status(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert all(f"  {c} " in out for c in ("run", "extract", "stats")), out
    with pytest.raises(SystemExit) as exc:
        main(["run", "--no-such-flag"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1 and "--no-such-flag" in err
