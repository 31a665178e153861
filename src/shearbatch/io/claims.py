"""Per-realization claims, so that overlapping array slices never compute one twice.

Design: one claims file per output root (``<root>/.claims``) and one POSIX
byte-range lock (``fcntl.lockf``) per realization, at an offset derived from
its run id (64 bits of SHA-256, below 2**62: two ids of a million-realization
campaign share a byte with probability ~1e-7, and a collision only makes one
task skip the other's realization with a warning). A ``bias-run`` claims every
realization it is about to compute before it starts, holds the locks until it
exits, and skips (with a warning naming them and the holder's pid) those
another process holds. Why locks rather than lock files with pid/host and a
staleness rule:

- the kernel drops a lock when its process dies, SIGKILL included, and an NFS
  server drops a dead client's locks when its lease expires; so there are no
  stale claims to recover and no heartbeat, age threshold or pid-liveness guess
  (which cannot see processes on other nodes);
- one file and one descriptor per process whatever the slice size (no
  per-realization files to create, clean up or leave behind);
- ``bias-extract`` can ask which planned realizations are being computed
  right now (:func:`held`) without disturbing the run.

After claiming, the caller re-reads each realization's status: one completed
by another process meanwhile is skipped, never redone. Where the filesystem
refuses locks (``ENOLCK``, ``EOPNOTSUPP``, e.g. Lustre mounted without
``flock``) claims are disabled with one warning: runs still never corrupt a
file (every file is renamed into place whole, ``convergence.json`` last) but
overlapping slices may then compute a realization twice.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import logging
import os
import struct
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

__all__ = ["CLAIMS", "Claims", "claim", "held"]

logger = logging.getLogger(__name__)

CLAIMS = ".claims"
_UNSUPPORTED = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL)
_BUSY = (errno.EAGAIN, errno.EACCES)


class Claims(NamedTuple):
    """The realizations this process holds, and those held by others (``run_id -> pid``)."""

    mine: list[str]
    others: dict[str, int]
    enabled: bool


def _offset(run_id: str) -> int:
    return int.from_bytes(hashlib.sha256(run_id.encode()).digest()[:8], "big") >> 2


def _holder(fd: int, off: int) -> int:
    """pid holding the byte at ``off`` (F_GETLK), 0 when free or unknown."""
    # struct flock on Linux: short l_type, short l_whence, off_t l_start, off_t l_len, pid_t l_pid
    req = struct.pack("hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, off, 1, 0)
    try:
        res = fcntl.fcntl(fd, fcntl.F_GETLK, req)
    except OSError:
        return 0
    l_type, _, _, _, pid = struct.unpack("hhqqi4x", res)
    return pid if l_type != fcntl.F_UNLCK else 0


@contextlib.contextmanager
def claim(root: str | Path, run_ids: Iterable[str]) -> Iterator[Claims]:
    """Claim ``run_ids`` under ``root`` for the duration of the ``with`` block.

    Realizations locked by another process are left out of ``mine`` and
    returned in ``others``; the caller skips them.
    """
    root, ids = Path(root), list(run_ids)
    root.mkdir(parents=True, exist_ok=True)
    path = root / CLAIMS
    for _ in range(100):
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            got = _lock_all(fd, ids)
        except OSError as err:
            os.close(fd)
            if err.errno not in _UNSUPPORTED:
                raise
            logger.warning("claims disabled (%s on %s): overlapping slices are not "
                           "detected", err.strerror, path)  # fmt: skip
            yield Claims(ids, {}, False)
            return
        if _same_file(fd, path):
            break
        os.close(fd)  # the file was removed by a process that finished meanwhile: retry
    else:  # pragma: no cover - a hundred removals in a row
        raise OSError(errno.EAGAIN, "claims file keeps being replaced", str(path))
    try:
        yield got
    finally:
        _release(fd, path)


def _lock_all(fd: int, ids: list[str]) -> Claims:
    mine, others = [], {}
    for rid in ids:
        off = _offset(rid)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, off, os.SEEK_SET)
        except OSError as err:
            if err.errno not in _BUSY:
                raise
            others[rid] = _holder(fd, off)
            continue
        mine.append(rid)
    return Claims(mine, others, True)


def _same_file(fd: int, path: Path) -> bool:
    try:
        return os.fstat(fd).st_ino == os.stat(path).st_ino
    except FileNotFoundError:
        return False


def _release(fd: int, path: Path) -> None:
    """Remove the claims file when nobody else holds a claim in it, then drop every lock.

    Removing it only while holding the whole file (a process that opened the old file
    meanwhile sees it is gone and retries) keeps claims exclusive.
    """
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 0, 0, os.SEEK_SET)
    except OSError:
        pass  # another process holds claims: leave the file
    else:
        with contextlib.suppress(OSError):
            if _same_file(fd, path):
                os.unlink(path)
    finally:
        os.close(fd)  # releases every lock of this process on the file


def held(root: str | Path, run_ids: Iterable[str]) -> dict[str, int]:
    """``{run_id: pid}`` of the realizations another process holds right now."""
    path = Path(root) / CLAIMS
    if not path.is_file():
        return {}
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return {}
    try:
        out = {}
        for rid in run_ids:
            if pid := _holder(fd, _offset(rid)):
                out[rid] = pid
        return out
    finally:
        os.close(fd)
