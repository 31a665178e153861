"""Every file the project writes is whole or absent: written through
:mod:`shearbatch.io.atomic` (a temporary file, fsync, rename), so a write that fails at the
last step (here: ``os.replace`` or ``os.link`` raising, as a full disk or a kill would stop
it) keeps the old file byte for byte and leaves no temporary file. A site that wrote its
file in place would change it: these tests would fail."""

import errno
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner


def temporaries(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.name.endswith(".tmp")]


def failing(monkeypatch, name: str, call: str = "replace") -> None:
    """``os.<call>`` raises ENOSPC for a target called ``name``."""
    real = getattr(os, call)

    def fail(src, dst, *a, **k):
        if os.path.basename(dst) == name:
            raise OSError(errno.ENOSPC, "No space left on device", src, None, dst)  # as os does
        return real(src, dst, *a, **k)

    monkeypatch.setattr(os, call, fail)


def summary_table(path: Path, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    rows = [{"run_id": f"r{s}_{g1}_{g2}", "seed": s, "g1_true": g1, "g2_true": g2,
             "g1_mean": g1 + rng.normal(0, 1e-3), "g2_mean": g2 + rng.normal(0, 1e-3),
             "g1_std": 1e-3, "g2_std": 1e-3, "status": "ok", "passed_convergence": True}
            for s in range(5) for g1 in (-0.02, 0.02) for g2 in (-0.02, 0.02)]  # fmt: skip
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


DONE = (0, 3)  # bias-stats' verdicts PASS and INCONCLUSIVE (5 seeds: inconclusive)


@pytest.mark.parametrize("target", ["bias_results.json", "report.html"])
def test_a_failed_stats_write_keeps_the_old_file_whole(tmp_path, monkeypatch, target):
    """bias-stats over a campaign's stats folder: a write that fails keeps the previous
    bias_results.json / report.html as they were; the same run then rewrites it."""
    from shearbatch.cli import bias_stats

    out = tmp_path / "stats"

    def stats(table: Path):
        return CliRunner().invoke(bias_stats, [
            "--input", str(table), "--output-dir", str(out), "--no-plots",
            "--report", str(out / "report.html")])  # fmt: skip

    res = stats(summary_table(tmp_path / "a.csv", 0))
    assert res.exit_code in DONE, res.output
    old = (out / target).read_bytes()
    new = summary_table(tmp_path / "b.csv", 1)
    with monkeypatch.context() as m:
        failing(m, target)
        res = stats(new)
    # one line naming the file, exit 4 (an output could not be written), no traceback
    assert res.exit_code == 4, res.output
    assert f"Error: cannot write {out / target}" in res.output, res.output
    assert "No space left on device" in res.output and "Traceback" not in res.output
    assert (out / target).read_bytes() == old
    assert not temporaries(tmp_path)
    res = stats(new)  # not vacuous: this run's file differs
    assert res.exit_code in DONE, res.output
    assert (out / target).read_bytes() != old


def _manifest(root: Path, n: int, **kw):
    from shearbatch.io.manifest import write_manifest

    expect = {"config_hash": "0123456789abcdef", "method": "map", "precision": "float64"}
    return write_manifest(root, config={"a": n}, expect=expect, plan={"n_realizations": n},
                          run_ids=[f"r{i}" for i in range(n)], batch_size=2, env={},
                          frozen={"a": n}, **kw)  # fmt: skip


@pytest.mark.parametrize("target", ["campaign.json", "config.yaml"])
def test_a_failed_manifest_rewrite_keeps_the_old_one(tmp_path, monkeypatch, target):
    root = tmp_path / "campaign"
    _, wrote = _manifest(root, 2)
    assert wrote
    old = {p.name: p.read_bytes() for p in root.iterdir()}
    assert set(old) == {"campaign.json", "config.yaml"}
    with monkeypatch.context() as m:
        failing(m, target)
        with pytest.raises(OSError, match="No space"):
            _manifest(root, 3, replace=True)
    assert (root / target).read_bytes() == old[target] and not temporaries(tmp_path)
    _, wrote = _manifest(root, 3, replace=True)
    assert wrote and (root / target).read_bytes() != old[target]


def test_a_manifest_is_created_whole_or_not_at_all(tmp_path, monkeypatch):
    """The first write links the manifest into place (exactly one task wins); a link
    that fails leaves no campaign.json, no config.yaml and no temporary file."""
    root = tmp_path / "campaign"
    with monkeypatch.context() as m:
        failing(m, "campaign.json", "link")
        with pytest.raises(OSError, match="No space"):
            _manifest(root, 2)
    assert list(root.iterdir()) == []


def test_a_failed_store_write_keeps_the_exported_program(tmp_path, monkeypatch):
    import jax
    import jax.numpy as jnp

    from shearbatch.engine import exported

    exp = jax.export.export(jax.jit(lambda x: x + 1.0))(jnp.zeros(3))
    path = tmp_path / "store" / "k.bin"
    exported._write(path, "k", "plus_one", exp)
    old = path.read_bytes()
    exp2 = jax.export.export(jax.jit(lambda x: x * 2.0 + 1.0))(jnp.zeros(3))
    with monkeypatch.context() as m:
        failing(m, path.name)
        with pytest.raises(OSError, match="No space"):
            exported._write(path, "k", "plus_one", exp2)
    assert path.read_bytes() == old and not temporaries(tmp_path)
    exported._write(path, "k", "plus_one", exp2)
    assert path.read_bytes() != old


#: check_writable in a process that is SIGKILLed at its probe's first close or removal
#: (where the old probe, a named file, was between its creation and its removal)
KILLED_IN_PROBE = """
import os, pathlib, signal, sys
import shearbatch.io.atomic
from shearbatch.app import check_writable
if sys.argv[2] == "named":
    del os.O_TMPFILE
def die(*a, **k):
    os.kill(os.getpid(), signal.SIGKILL)
os.close = os.unlink = pathlib.Path.unlink = die
check_writable(pathlib.Path(sys.argv[1]))
"""


@pytest.mark.parametrize("kind", ["O_TMPFILE", "named"])
def test_a_run_killed_while_probing_its_output_root_leaves_no_temporary(tmp_path, monkeypatch,
                                                                       kind):  # fmt: skip
    """bias-run's write probe of --output-dir (app.check_writable), killed midway: a file
    without a name (O_TMPFILE) leaves nothing; where the probe has a name, the next run's
    probe removes it (the 'writers busy' kill of test_interrupts found the old probe, a
    named file never removed, left in the output root)."""
    from shearbatch.app import check_writable

    if kind == "O_TMPFILE" and not hasattr(os, "O_TMPFILE"):
        pytest.skip("no O_TMPFILE on this platform")
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, "-c", KILLED_IN_PROBE, str(out), kind],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert p.returncode == -signal.SIGKILL, p.stderr
    if kind == "O_TMPFILE":
        assert list(out.iterdir()) == []
    else:
        monkeypatch.delattr(os, "O_TMPFILE", raising=False)
    check_writable(out)  # the next run
    assert list(out.iterdir()) == []
