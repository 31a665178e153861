"""The one atomic-write primitive (shearbatch.io.atomic): a reader sees the old file or
the whole new one; a failed write leaves the target and no temporary file behind."""

import errno
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


def test_an_exclusive_write_creates_only_where_no_file_is(tmp_path):
    """``exclusive``: linked into place, so of several writers exactly one creates the file
    (the campaign manifest); the others get FileExistsError and leave no temporary."""
    path = tmp_path / "campaign.json"
    atomic.write_text(path, "first\n", exclusive=True)
    with pytest.raises(FileExistsError):
        atomic.write_text(path, "second\n", exclusive=True)
    assert path.read_text() == "first\n"
    assert [p.name for p in tmp_path.iterdir()] == ["campaign.json"]


@pytest.mark.parametrize("step", ["fsync", "replace", "link"])
def test_a_write_failing_at_its_last_steps_keeps_the_old_file(tmp_path, monkeypatch, step):
    path = tmp_path / "bias_results.json"
    atomic.write_text(path, "old\n")

    def fail(*a, **k):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, step, fail)
    for write in (lambda: atomic.write_text(path, "new\n", exclusive=step == "link"),
                  lambda: atomic.atomic_write(path, lambda t: t.write_text("new\n"),
                                              exclusive=step == "link")):  # fmt: skip
        with pytest.raises(OSError, match="Input/output"):
            write()
        assert path.read_text() == "old\n"
        assert [p.name for p in tmp_path.iterdir()] == ["bias_results.json"]


def _dead_pid() -> int:
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                         capture_output=True, text=True, check=True)  # fmt: skip
    return int(out.stdout)


def test_orphans_of_killed_processes_of_this_host_are_removed(tmp_path):
    import socket

    dead, host = _dead_pid(), atomic.host_tag()
    names = {
        f".campaign.json.{host}.{dead}.0a1b2c3d.tmp": True,
        f".config.yaml.{socket.gethostname()}.{dead}.tmp": True,  # the name before io.atomic
        f".campaign.json.{host}.{os.getppid()}.0a1b2c3e.tmp": False,  # a live process
        f".campaign.json.{host}.{os.getpid()}.0a1b2c3f.tmp": False,  # this one
        f".campaign.json.otherhost.{dead}.0a1b2c40.tmp": False,  # another node's
        f".summary.csv.{host}.{dead}.0a1b2c41.tmp": False,  # not a name asked for
        "campaign.json": False,
    }
    for n in names:
        (tmp_path / n).write_text("{")
    assert atomic.remove_orphans(tmp_path, ("campaign.json", "config.yaml")) == 2
    assert {p.name for p in tmp_path.iterdir()} == {n for n, gone in names.items() if not gone}
    assert atomic.remove_orphans(tmp_path / "absent", ("campaign.json",)) == 0


@pytest.mark.parametrize("unnamed", [True, False], ids=["O_TMPFILE", "named"])
def test_a_probe_leaves_nothing_and_removes_the_probes_of_killed_runs(tmp_path, monkeypatch,
                                                                      unnamed):  # fmt: skip
    import socket

    if not unnamed:
        monkeypatch.delattr(os, "O_TMPFILE", raising=False)
    elif not hasattr(os, "O_TMPFILE"):
        pytest.skip("no O_TMPFILE on this platform")
    left = tmp_path / f".write-probe.{socket.gethostname()}.{_dead_pid()}.tmp"  # old name
    left.write_bytes(b"")
    atomic.probe(tmp_path)
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "ro").mkdir(mode=0o555)
    if os.geteuid() != 0:  # root writes anywhere
        with pytest.raises(PermissionError):
            atomic.probe(tmp_path / "ro")
