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
import os
import re
import secrets
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

__all__ = [
    "atomic_write",
    "host_tag",
    "replacing",
    "temporary_path",
    "write_bytes",
    "write_text",
]


def host_tag() -> str:
    """This host's name as temporary names carry it (letters, digits and '-')."""
    return re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname()) or "host"


def temporary_path(path: str | Path) -> Path:
    """A fresh temporary name next to ``path``, created empty (mode 0666 less the user's
    umask, as a plain ``open`` would)."""
    path = Path(path)
    while True:
        tmp = path.with_name(f".{path.name}.{host_tag()}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        except FileExistsError:  # pragma: no cover - 32 random bits
            continue
        return tmp


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def replacing(path: str | Path, durable: bool = True) -> Iterator[Path]:
    """``with replacing(path) as tmp:`` write the content to ``tmp`` (a fresh file in
    ``path``'s directory); on leaving the block it is fsynced and renamed to ``path``, or
    removed when the block raised (the target is then untouched). Creates the parent
    directory. ``durable=False`` skips the fsync: the file is still whole or absent
    whenever the process is killed, but a power loss may leave it empty (the realization
    writer's choice: its files are checksummed, and a damaged one is redone on resume)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_path(path)
    try:
        yield tmp
        if durable:
            _fsync(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write(path: str | Path, write: Callable[[Path], object], durable: bool = True) -> Path:
    """:func:`replacing` for a writer that takes a path: ``write(tmp)``. Returns ``path``."""
    with replacing(path, durable) as tmp:
        write(tmp)
    return Path(path)


def write_text(path: str | Path, text: str, encoding: str = "utf-8") -> Path:
    """``text`` at ``path``, atomically (:func:`replacing`)."""
    return write_bytes(path, text.encode(encoding))


def write_bytes(path: str | Path, data: bytes) -> Path:
    """``data`` at ``path``, atomically (:func:`replacing`)."""
    with replacing(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)
