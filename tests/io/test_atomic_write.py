"""The one atomic-write primitive (shearbatch.io.atomic): a reader sees the old file or
the whole new one; a failed write leaves the target and no temporary file behind."""

import os
import stat

import pytest

from shearbatch.io import atomic


def test_write_text_replaces_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "sub" / "bias_results.json"  # the folder is created
    atomic.write_text(path, "old\n")
    atomic.write_text(path, "new ± σ\n")
    assert path.read_text(encoding="utf-8") == "new ± σ\n"
    assert sorted(p.name for p in path.parent.iterdir()) == ["bias_results.json"]


def test_a_failed_write_keeps_the_old_file(tmp_path):
    path = tmp_path / "report.html"
    atomic.write_text(path, "whole")

    def half(tmp):
        tmp.write_text("par")
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError, match="interrupted"):
        atomic.atomic_write(path, half)
    assert path.read_text() == "whole"
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]


def test_the_temporary_is_a_sibling_with_the_umask_mode(tmp_path):
    seen = []
    old = os.umask(0o027)
    try:
        atomic.atomic_write(tmp_path / "summary.csv", lambda tmp: seen.append(tmp) or
                            tmp.write_text("a,b\n"))  # fmt: skip
    finally:
        os.umask(old)
    (tmp,) = seen
    assert tmp.parent == tmp_path and tmp.name.startswith(".summary.csv.")
    assert tmp.name.endswith(".tmp") and not tmp.exists()
    assert stat.S_IMODE((tmp_path / "summary.csv").stat().st_mode) == 0o640
