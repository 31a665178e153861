"""The one way a file is written: to a fresh temporary name in the same directory,
flushed to disk (``fsync``), then renamed over the target (``os.replace``, atomic on a
POSIX file system). A reader sees the old file or the whole new one, never a part; a
crash leaves at most a temporary file ``.<name>.<host>.<pid>.<random>.tmp`` beside it
(the pattern :func:`remove_orphans` removes once its process is dead: in realization
directories, :func:`shearbatch.io.writer.clean_orphans`; in the output root, the
manifest's writer and the write probe; in the exported-program store, its writer).

``with replacing(path) as tmp:`` hands the block a temporary path to write (for writers
that want a path: pandas, zipfile, netCDF); :func:`atomic_write` is the same for a
callback; :func:`write_text` and :func:`write_bytes` cover the rest. ``exclusive=True``
links the temporary file into place instead of renaming it over the target: the file is
created whole only where none exists (``FileExistsError`` otherwise; the campaign
manifest, of which exactly one of several starting tasks must win).
:func:`remove_orphans` removes the temporary files of this host's killed processes;
:func:`probe` checks that a directory takes new files, leaving nothing behind.

Files that are not written this way, on purpose: ``.claims`` (byte-range locks on one
inode that must not be replaced; its content is never written), ``commands.txt`` (one
short ``O_APPEND`` line per process, so that concurrent array tasks do not lose each
other's lines), the compile lock and markers (empty files whose existence is the
content).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import re
import secrets
import socket
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

__all__ = [
    "atomic_write",
    "host_tag",
    "probe",
    "put_bytes",
    "put_with",
    "remove_orphans",
    "replacing",
    "temporary_path",
    "write_bytes",
    "write_text",
]


@functools.cache
def host_tag() -> str:
    """This host's name as temporary names carry it (letters, digits and '-'); looked up
    once per process (every realization's three files name it)."""
    return re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname()) or "host"


def _create_temporary(path: str) -> tuple[str, int]:
    """A fresh temporary name next to ``path``, created (mode 0666 less the user's umask,
    as a plain ``open`` would), and its file descriptor, open for writing. Plain strings:
    the realization writer calls this three times per realization."""
    head, name = os.path.split(path)
    prefix = os.path.join(head, f".{name}.{host_tag()}.{os.getpid()}.")
    while True:
        tmp = f"{prefix}{secrets.token_hex(4)}.tmp"
        try:
            return tmp, os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:  # pragma: no cover - 32 random bits
            continue


def temporary_path(path: str | Path) -> Path:
    """A fresh temporary name next to ``path``, created empty (mode 0666 less the user's
    umask, as a plain ``open`` would)."""
    tmp, fd = _create_temporary(os.fspath(path))
    os.close(fd)
    return Path(tmp)


def _fsync(path: str | Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _into_place(tmp: str, path: str, exclusive: bool) -> None:
    """The last step: ``tmp`` renamed over ``path``, or (``exclusive``) linked to ``path``
    where no file of that name exists (``FileExistsError`` otherwise) and then removed."""
    if exclusive:
        os.link(tmp, path)
        _unlink(tmp)
    else:
        os.replace(tmp, path)


@contextlib.contextmanager
def replacing(path: str | Path, durable: bool = True, parent: bool = True, *,
              exclusive: bool = False) -> Iterator[Path]:  # fmt: skip
    """``with replacing(path) as tmp:`` write the content to ``tmp`` (a fresh file in
    ``path``'s directory); on leaving the block it is fsynced and renamed to ``path``, or
    removed when the block raised (the target is then untouched). Creates the parent
    directory (``parent=False``: the caller knows it exists). ``durable=False`` skips the
    fsync: the file is still whole or absent whenever the process is killed, but a power
    loss may leave it empty (the realization writer's choice: its files are checksummed,
    and a damaged one is redone on resume). ``exclusive``: see the module's note."""
    path = os.fspath(path)
    if parent:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp, fd = _create_temporary(path)
    os.close(fd)
    try:
        yield Path(tmp)
        if durable:
            _fsync(tmp)
        _into_place(tmp, path, exclusive)
    except BaseException:
        _unlink(tmp)
        raise


def atomic_write(path: str | Path, write: Callable[[Path], object], durable: bool = True,
                 parent: bool = True, *, exclusive: bool = False) -> Path:  # fmt: skip
    """:func:`replacing` for a writer that takes a path: ``write(tmp)``. Returns ``path``."""
    with replacing(path, durable, parent, exclusive=exclusive) as tmp:
        write(tmp)
    return Path(path)


def write_text(path: str | Path, text: str, encoding: str = "utf-8", *, durable: bool = True,
               parent: bool = True, exclusive: bool = False) -> Path:  # fmt: skip
    """``text`` at ``path``, atomically (:func:`replacing`)."""
    return write_bytes(path, text.encode(encoding), durable, parent, exclusive=exclusive)


def write_bytes(path: str | Path, data: bytes | memoryview, durable: bool = True,
                parent: bool = True, *, exclusive: bool = False) -> Path:  # fmt: skip
    """``data`` at ``path``, atomically (as :func:`replacing` does, through the one file
    descriptor the temporary file was created with)."""
    put_bytes(os.fspath(path), data, durable, parent, exclusive=exclusive)
    return Path(path)


def put_with(path: str, write: Callable[[str], object], durable: bool = True,
             parent: bool = True) -> None:  # fmt: skip
    """:func:`atomic_write` of a ``str`` path whose ``write`` takes the temporary file's
    name as a ``str`` (the realization writer's hot path: no :class:`~pathlib.Path` made)."""
    if parent:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp, fd = _create_temporary(path)
    os.close(fd)
    try:
        write(tmp)
        if durable:
            _fsync(tmp)
        os.replace(tmp, path)
    except BaseException:
        _unlink(tmp)
        raise


def put_bytes(path: str, data: bytes | memoryview, durable: bool = True,
              parent: bool = True, *, exclusive: bool = False) -> None:  # fmt: skip
    """:func:`write_bytes` of a ``str`` path, returning nothing (the realization writer's
    hot path: no :class:`~pathlib.Path` made)."""
    if parent:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp, fd = _create_temporary(path)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        _into_place(tmp, path, exclusive)
    except BaseException:
        _unlink(tmp)
        raise


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


#: the tail of a temporary name after ``.<name>.<host>.``: ``<pid>.<hex>.tmp`` (and
#: ``<pid>.tmp``, the name the manifest's own writer gave before this module served it)
_TAIL = re.compile(r"^(?P<pid>\d+)(?:\.[0-9a-f]+)?\.tmp$")


def remove_orphans(directory: str | Path, names: Iterable[str]) -> int:
    """Remove the temporary files of the files ``names`` in ``directory`` left by killed
    processes of THIS host (their pid is dead); returns how many. Files of other hosts or
    of live processes (a concurrent task) are left alone."""
    hosts = {host_tag(), socket.gethostname()}
    prefixes = tuple(f".{name}.{host}." for name in names for host in hosts)
    try:
        entries = list(os.scandir(directory))
    except (FileNotFoundError, NotADirectoryError, PermissionError):  # nothing seen to remove
        return 0
    n, me = 0, os.getpid()
    for e in entries:
        if not e.name.startswith(prefixes):
            continue
        for prefix in prefixes:
            m = _TAIL.match(e.name[len(prefix) :]) if e.name.startswith(prefix) else None
            if m is not None:
                break
        else:
            continue
        pid = int(m["pid"])
        if pid != me and not _pid_alive(pid):
            _unlink(e.path)
            n += 1
    return n


#: the name :func:`probe` gives its file where the file system has no ``O_TMPFILE``
PROBE = "write-probe"


def probe(directory: str | Path) -> None:
    """Raise ``OSError`` unless a new file can be created in ``directory`` (which exists).
    Nothing is left behind, even by a kill: the file is created without a name
    (``O_TMPFILE``) where the file system allows it; elsewhere it is a temporary file of
    :data:`PROBE`, removed at once; the probes this host's killed processes left are
    removed first (:func:`remove_orphans`)."""
    directory = os.fspath(directory)
    remove_orphans(directory, (PROBE,))  # also those of versions that named every probe
    flag = getattr(os, "O_TMPFILE", 0)
    if flag:
        try:
            fd = os.open(directory, flag | os.O_WRONLY, 0o600)
        except OSError as err:  # the file system (or the kernel) has no unnamed files
            if err.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
                raise
        else:
            os.close(fd)
            return
    tmp, fd = _create_temporary(os.path.join(directory, PROBE))
    try:
        os.close(fd)
    finally:
        _unlink(tmp)
