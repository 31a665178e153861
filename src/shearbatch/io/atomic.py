"""The one way a file is written: to a fresh temporary name in the same directory,
flushed to disk (``fsync``), then renamed over the target (``os.replace``, atomic on a
POSIX file system). A reader sees the old file or the whole new one, never a part; a
crash leaves at most a temporary file ``.<name>.<host>.<pid>.<random>.tmp`` beside it
(the pattern :func:`shearbatch.io.writer.clean_orphans` removes in realization
directories).

``with replacing(path) as tmp:`` hands the block a temporary path to write (for writers
that want a path: pandas, zipfile, netCDF); :func:`atomic_write` is the same for a
callback; :func:`write_text` and :func:`write_bytes` cover the rest.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import secrets
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

__all__ = [
    "atomic_write",
    "host_tag",
    "put_bytes",
    "put_with",
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


@contextlib.contextmanager
def replacing(path: str | Path, durable: bool = True, parent: bool = True) -> Iterator[Path]:
    """``with replacing(path) as tmp:`` write the content to ``tmp`` (a fresh file in
    ``path``'s directory); on leaving the block it is fsynced and renamed to ``path``, or
    removed when the block raised (the target is then untouched). Creates the parent
    directory (``parent=False``: the caller knows it exists). ``durable=False`` skips the
    fsync: the file is still whole or absent whenever the process is killed, but a power
    loss may leave it empty (the realization writer's choice: its files are checksummed,
    and a damaged one is redone on resume)."""
    path = os.fspath(path)
    if parent:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp, fd = _create_temporary(path)
    os.close(fd)
    try:
        yield Path(tmp)
        if durable:
            _fsync(tmp)
        os.replace(tmp, path)
    except BaseException:
        _unlink(tmp)
        raise


def atomic_write(path: str | Path, write: Callable[[Path], object], durable: bool = True,
                 parent: bool = True) -> Path:  # fmt: skip
    """:func:`replacing` for a writer that takes a path: ``write(tmp)``. Returns ``path``."""
    with replacing(path, durable, parent) as tmp:
        write(tmp)
    return Path(path)


def write_text(path: str | Path, text: str, encoding: str = "utf-8") -> Path:
    """``text`` at ``path``, atomically (:func:`replacing`)."""
    return write_bytes(path, text.encode(encoding))


def write_bytes(path: str | Path, data: bytes | memoryview, durable: bool = True,
                parent: bool = True) -> Path:  # fmt: skip
    """``data`` at ``path``, atomically (as :func:`replacing` does, through the one file
    descriptor the temporary file was created with)."""
    put_bytes(os.fspath(path), data, durable, parent)
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
              parent: bool = True) -> None:  # fmt: skip
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
        os.replace(tmp, path)
    except BaseException:
        _unlink(tmp)
        raise
