"""Each realization names the code that wrote it (issue 44 item 1): the git commit of the
checkout the package runs from, a dirty flag and a fingerprint of the code that computes
results (shearbatch._version.code_version; tests/guarantees/test_damage.py checks that
bias-run records it and bias-extract reports a campaign spanning several)."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import shearbatch
from shearbatch._version import code_version, fingerprint

PACKAGE = Path(shearbatch.__file__).resolve().parent


def _git(*args):
    try:
        out = subprocess.run(["git", "-C", str(PACKAGE), *args], capture_output=True, text=True,
                             check=True)  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout


def test_in_a_checkout_the_commit_is_head_and_dirty_says_whether_the_package_differs():
    head = _git("rev-parse", "HEAD")
    if head is None or _git("ls-files", "--error-unmatch", "__init__.py") is None:
        pytest.skip("the package is not a tracked file of a git checkout")
    got = code_version()
    assert got["commit"] == head.strip()
    assert got["dirty"] is bool(_git("status", "--porcelain", "--", "."))
    assert got["fingerprint"] == fingerprint() and len(got["fingerprint"]) == 16
    assert code_version() is got  # once per process


def test_outside_a_git_checkout_commit_and_dirty_are_none(tmp_path):
    shutil.copytree(PACKAGE, tmp_path / "shearbatch", ignore=shutil.ignore_patterns("__pycache__"))
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); "
            "from shearbatch import _version as v; "
            "assert v.__file__.startswith(sys.argv[1]); print(json.dumps(v.code_version()))")  # fmt: skip
    env = {"GIT_CEILING_DIRECTORIES": str(tmp_path.parent), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                         text=True, check=True, env=env, cwd=tmp_path)  # fmt: skip
    got = json.loads(out.stdout)
    assert got == {"commit": None, "dirty": None, "fingerprint": fingerprint()}
    assert out.stdout.count("\n") == 1 and not out.stderr  # nothing printed: it logs


def test_the_fingerprint_follows_the_code_that_computes_results(tmp_path):
    root = tmp_path / "shearbatch"
    shutil.copytree(PACKAGE, root, ignore=shutil.ignore_patterns("__pycache__"))
    same = fingerprint(root)
    assert same == fingerprint()
    for part in ("analysis/summary_table.py", "io/writer.py", "cli/run.py", "app/plan.py"):
        (root / part).write_text((root / part).read_text() + "\n# a comment\n")
        assert fingerprint(root) == same, part  # reading, storage, the command line
    for part in ("core/methods/map.py", "engine/loop.py", "core/render.py"):
        before = fingerprint(root)
        (root / part).write_text((root / part).read_text() + "\n# a comment\n")
        assert fingerprint(root) != before, part


def _rows(*specs):
    """Finished summary rows: (commit, dirty, fingerprint, config hash) each, None: unrecorded."""
    return [{"run_id": f"r{i}", "status": "ok", "config_hash": h, "code_commit": c,
             "code_dirty": d, "code_fingerprint": f} for i, (c, d, f, h) in enumerate(specs)]  # fmt: skip


@pytest.mark.parametrize(("rows", "want"), [
    (_rows(("a" * 40, False, "f1", "h"), ("a" * 40, False, "f1", "h")), None),
    (_rows(("a" * 40, False, "f1", "h"), ("b" * 40, False, "f1", "h")),
     "code versions (commit[+dirty]) aaaaaaaaaaaa x1, bbbbbbbbbbbb x1: the same method code "
     "(fingerprint f1) and config hash: results unchanged"),
    (_rows(("a" * 40, False, "f1", "h"), ("a" * 40, True, "f2", "h")),
     "aaaaaaaaaaaa x1, aaaaaaaaaaaa+dirty x1: the method code differs (fingerprints f1 x1, f2 x1)"),
    (_rows(("a" * 40, False, "f1", "h"), ("b" * 40, False, "f1", "k")),
     "mixed campaign settings: config_hash h x1, k x1"),
    (_rows(("a" * 40, False, "f1", "h"), (None, None, None, "h")),
     "aaaaaaaaaaaa x1, unrecorded x1: the method code differs (fingerprints f1 x1, unrecorded x1)"),
    (_rows((None, None, "f1", "h"), (None, None, "f2", "h")),
     "no git commit x2: the method code differs (fingerprints f1 x1, f2 x1)"),
], ids=["one-version", "commits-same-code", "dirty-edit", "config-hash", "unrecorded", "no-git"])  # fmt: skip
def test_a_campaign_spanning_code_versions_is_reported_in_one_line(tmp_path, rows, want):
    from shearbatch.analysis.progress import campaign_progress, mixed_warning

    _, prog = campaign_progress(tmp_path, rows)
    line = mixed_warning(prog.mixed)
    if want is None:
        assert line is None
        return
    assert want in line and "\n" not in line, line
    if "config_hash" in want:  # and the code versions, in the same line
        assert "with different config hashes, their results may differ" in line, line
