"""A netCDF-4 file of a known structure as bytes: a template, patched with each file's values.

Every ``posterior.nc`` of a campaign has the same structure (groups, variables, dimensions,
shapes, dtypes, attribute names, their types and byte lengths); only the values differ: the
variables' data and some attributes (``run_id``, ``seed``, ``g1_true``, ``created_at``...).
netCDF-C and HDF5 spend ~1.5-2 ms per file creating, defining and closing it; the same
bytes are a copy of a template with the values put in at known offsets (~0.1 ms).

:func:`build` makes a :class:`Template` of one structure from two files that netCDF-C wrote
with two different sets of sentinel values (``write``, the caller's netCDF4 writer), and
checks it before it is used:

- each value (a field: a variable's data or an attribute's value) is where the first file
  holds its first sentinel AND the second file its second, at exactly one offset (the
  data of a variable is stored contiguously and uncompressed, as netCDF-C stores it here;
  an attribute value as its bytes);
- the other bytes the two files differ in are HDF5 metadata checksums (Jenkins' lookup3,
  :func:`lookup3`) of the blocks holding attribute values (object header chunks
  ``OHDR``/``OCHK``: from the block's signature to the checksum; fractal heap direct
  blocks ``FHDB``: the whole block with the checksum zeroed), each found and confirmed
  on both files;
- the template with the second file's values put in (:meth:`Template.render`) is the
  second file, byte for byte.

Anything else (a value not found exactly once, a difference that is no checksum, files of
different lengths) raises :class:`TemplateError`: the caller then writes with netCDF4.
The caller also compares a template's first real file against netCDF4's (the writer's
first use of each structure in a process, :mod:`.writer`).
"""

from __future__ import annotations

import ctypes
import functools
import string
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

__all__ = ["Template", "TemplateError", "build", "encode", "field_spec", "lookup3"]

#: signatures of the HDF5 (version 2) metadata blocks, which carry a checksum
SIGNATURES = (b"OHDR", b"OCHK", b"FHDB", b"FHIB", b"FRHP", b"BTHD", b"BTIN", b"BTLF",
              b"FSHD", b"FSSE", b"SMTB", b"SMLI")  # fmt: skip

#: the characters of string sentinels
_CHARS = np.frombuffer((string.ascii_letters + string.digits).encode(), np.uint8)


class TemplateError(ValueError):
    """A template of this structure cannot be made (or is not right): why, in one line."""


# --------------------------------------------------------------------------- fields


def field_spec(value: Any) -> tuple | None:
    """What a template of ``value`` depends on (part of the structure's key), or None for a
    value a template does not take (netCDF4 writes it): a non-empty C-contiguous native
    numeric array (``("a", dtype, shape)``), an ``int`` that fits int64 (``("i",)``), a
    ``float`` (``("f",)``), a non-empty ASCII ``str`` (``("s", length)``, netCDF's NC_CHAR).
    ``bool`` is no field (the writer stores it as ``int``)."""
    t = type(value)
    if t is np.ndarray:
        dt = value.dtype
        if (dt.kind in "iuf" and dt.isnative and value.size > 0
                and value.flags.c_contiguous):  # fmt: skip
            return ("a", dt.str, value.shape)
        return None
    if t is int:
        return ("i",) if -(2**63) <= value < 2**63 else None
    if t is float:
        return ("f",)
    if t is str:
        return ("s", len(value)) if value and value.isascii() and "\x00" not in value else None
    return None


def encode(value: Any) -> np.ndarray:
    """The bytes ``value`` (a field: :func:`field_spec`) is stored as, as a uint8 array:
    an array's raw bytes (netCDF-C stores native numbers natively), int64 and float64
    little-endian, a string's ASCII bytes."""
    t = type(value)
    if t is np.ndarray:
        return value.reshape(-1).view(np.uint8)
    if t is int:
        return np.array(value, "<i8").reshape(1).view(np.uint8)
    if t is float:
        return np.array(value, "<f8").reshape(1).view(np.uint8)
    return np.frombuffer(value.encode("ascii"), np.uint8)


def sentinels(specs: Sequence[tuple], seed: int) -> list[Any]:
    """One value per field of ``specs``, pseudo-random (``seed``): strings of letters and
    digits, finite numbers."""
    rng = np.random.default_rng(seed)
    out: list[Any] = []
    for spec in specs:
        if spec[0] == "a":
            dt = np.dtype(spec[1])
            a = np.frombuffer(rng.bytes(dt.itemsize * int(np.prod(spec[2]))), dt).copy()
            if dt.kind == "f":
                bad = ~np.isfinite(a)
                a[bad] = rng.uniform(1, 2, int(bad.sum()))
            out.append(a.reshape(spec[2]))
        elif spec[0] == "i":
            out.append(int(rng.integers(-(2**62), 2**62)))
        elif spec[0] == "f":
            out.append(float(rng.uniform(-1e6, 1e6)))
        else:
            out.append(_CHARS[rng.integers(0, len(_CHARS), spec[1])].tobytes().decode())
    return out


def _other(specs: Sequence[tuple], first: list[Any], seed: int) -> list[Any]:
    """Second sentinels: new random values, and strings differing from ``first`` at every
    character (a short string is then told by its two sentinels together)."""
    out = sentinels(specs, seed)
    rng = np.random.default_rng(seed + 1)
    n = len(_CHARS)
    lookup = np.full(256, -1, np.int64)
    lookup[_CHARS] = np.arange(n)
    for i, spec in enumerate(specs):
        if spec[0] == "s":
            idx = lookup[np.frombuffer(first[i].encode(), np.uint8)]
            out[i] = _CHARS[(idx + rng.integers(1, n, spec[1])) % n].tobytes().decode()
    return out


# --------------------------------------------------------------------------- checksums


@functools.cache
def _hdf5_lookup3() -> Callable[[int, int, int], int] | None:
    """HDF5's own ``H5_checksum_metadata`` (lookup3), from the library netCDF4 loaded, or
    None where it is not exported (:func:`lookup3` computes it in Python then)."""
    try:
        import netCDF4._netCDF4 as ext

        f = ctypes.CDLL(ext.__file__).H5_checksum_metadata
    except (ImportError, OSError, AttributeError):  # pragma: no cover - other builds
        return None
    f.restype = ctypes.c_uint32
    f.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint32)
    return f


_M = 0xFFFFFFFF


def _rot(x: int, k: int) -> int:
    return ((x << k) | (x >> (32 - k))) & _M


def lookup3_py(data: bytes) -> int:
    """Bob Jenkins' lookup3 ``hashlittle`` with initval 0, byte by byte (HDF5's metadata
    checksum, ``H5_checksum_lookup3``)."""
    n = len(data)
    a = b = c = (0xDEADBEEF + n) & _M
    i = 0
    while n > 12:
        a = (a + int.from_bytes(data[i : i + 4], "little")) & _M
        b = (b + int.from_bytes(data[i + 4 : i + 8], "little")) & _M
        c = (c + int.from_bytes(data[i + 8 : i + 12], "little")) & _M
        a = ((a - c) & _M) ^ _rot(c, 4)
        c = (c + b) & _M
        b = ((b - a) & _M) ^ _rot(a, 6)
        a = (a + c) & _M
        c = ((c - b) & _M) ^ _rot(b, 8)
        b = (b + a) & _M
        a = ((a - c) & _M) ^ _rot(c, 16)
        c = (c + b) & _M
        b = ((b - a) & _M) ^ _rot(a, 19)
        a = (a + c) & _M
        c = ((c - b) & _M) ^ _rot(b, 4)
        b = (b + a) & _M
        i += 12
        n -= 12
    if n == 0:
        return c
    tail = bytes(data[i : i + n]) + bytes(12 - n)
    a = (a + int.from_bytes(tail[0:4], "little")) & _M
    b = (b + int.from_bytes(tail[4:8], "little")) & _M
    c = (c + int.from_bytes(tail[8:12], "little")) & _M
    c = ((c ^ b) - _rot(b, 14)) & _M
    a = ((a ^ c) - _rot(c, 11)) & _M
    b = ((b ^ a) - _rot(a, 25)) & _M
    c = ((c ^ b) - _rot(b, 16)) & _M
    a = ((a ^ c) - _rot(c, 4)) & _M
    b = ((b ^ a) - _rot(a, 14)) & _M
    c = ((c ^ b) - _rot(b, 24)) & _M
    return c


def lookup3(buf: np.ndarray, start: int, stop: int) -> int:
    """HDF5's metadata checksum of ``buf[start:stop]`` (``buf``: a contiguous uint8 array)."""
    f = _hdf5_lookup3()
    if f is None or stop <= start:  # pragma: no cover - other builds
        return lookup3_py(buf[start:stop].tobytes())
    return int(f(buf.ctypes.data + start, stop - start, 0))


class Checksum(NamedTuple):
    """A metadata checksum at ``at`` (4 bytes, little-endian) of ``buf[start:stop]``, with
    its own 4 bytes zeroed first when ``zeroed`` (a fractal heap direct block)."""

    start: int
    stop: int
    at: int
    zeroed: bool

    def value(self, buf: np.ndarray) -> int:
        if self.zeroed:
            buf[self.at : self.at + 4] = 0
        return lookup3(buf, self.start, self.stop)

    def holds(self, buf: np.ndarray) -> bool:
        """Whether ``buf`` holds this checksum (``buf`` unchanged)."""
        stored = int.from_bytes(buf[self.at : self.at + 4].tobytes(), "little")
        block = buf[self.start : max(self.stop, self.at + 4)].copy()  # the block alone
        return self._replace(start=0, stop=self.stop - self.start,
                             at=self.at - self.start).value(block) == stored  # fmt: skip


def _checksum_at(a: np.ndarray, b: np.ndarray, raw: bytes, lo: int, hi: int) -> Checksum:
    """The checksum of both files whose 4 bytes hold ``a``'s and ``b``'s differences in
    ``[lo, hi]`` (the module doc's two kinds of block; ``raw``: ``a``'s bytes), or
    :class:`TemplateError`."""
    for at in range(max(0, hi - 3), lo + 1):
        start = max(raw.rfind(sig, 0, at) for sig in SIGNATURES)
        if start < 0:
            continue
        candidates = [Checksum(start, at, at, False)]
        size = 16
        while start + size <= len(a):
            if start + size >= at + 4:
                candidates.append(Checksum(start, start + size, at, True))
            size *= 2
        for c in candidates:
            if c.holds(a) and c.holds(b):
                return c
    raise TemplateError(f"the files differ at bytes {lo}-{hi}, which are no value and no "
                        f"metadata checksum found")  # fmt: skip


# --------------------------------------------------------------------------- templates


class Template:
    """A file's bytes (``base``) with each field's offset and length (``spans``) and the
    metadata checksums to recompute (``sums``); :meth:`render` makes a file of the same
    structure with other values."""

    def __init__(self, base: np.ndarray, spans: list[tuple[int, int]], sums: list[Checksum]):
        self.base, self.spans, self.sums = base, spans, sums
        self.base.flags.writeable = False

    @property
    def size(self) -> int:
        return len(self.base)

    def render(self, values: Sequence[Any]) -> np.ndarray:
        """The file's bytes with ``values`` (one per field, :func:`field_spec` as the
        template's) in place, its checksums recomputed: a new uint8 array."""
        buf = self.base.copy()
        for (at, n), v in zip(self.spans, values, strict=True):
            buf[at : at + n] = encode(v)  # a length other than n raises (numpy broadcast)
        for c in self.sums:
            buf[c.at : c.at + 4] = np.frombuffer(c.value(buf).to_bytes(4, "little"), np.uint8)
        return buf


def _locate(a: bytes, b: bytes, sa: np.ndarray, sb: np.ndarray) -> int:
    """The one offset where ``a`` holds ``sa`` and ``b`` holds ``sb``."""
    na, nb, n = sa.tobytes(), sb.tobytes(), len(sa)
    hits, at = [], a.find(na)
    while at >= 0:
        if b[at : at + n] == nb:
            hits.append(at)
        at = a.find(na, at + 1)
    if len(hits) != 1:
        raise TemplateError(f"a value of {n} bytes is found {len(hits)} times, not once")
    return hits[0]


def build(specs: Sequence[tuple], write: Callable[[list[Any]], bytes], seed: int = 0) -> Template:
    """The template of a structure whose fields are ``specs`` (:func:`field_spec` of each
    value, in the order :meth:`Template.render` takes them); ``write(values)``: the
    bytes netCDF4 writes with those values. Checked as the module doc says;
    :class:`TemplateError` when it cannot be made."""
    va = sentinels(specs, seed)
    vb = _other(specs, va, seed + 1)
    fa, fb = write(va), write(vb)
    if len(fa) != len(fb):
        raise TemplateError(f"the file's length depends on its values ({len(fa)}, {len(fb)} "
                            f"bytes)")  # fmt: skip
    a, b = np.frombuffer(fa, np.uint8).copy(), np.frombuffer(fb, np.uint8)
    spans = []
    covered = np.zeros(len(a), bool)
    for x, y in zip(va, vb, strict=True):
        ex = encode(x)
        at = _locate(fa, fb, ex, encode(y))
        if covered[at : at + len(ex)].any():
            raise TemplateError("two values overlap")
        covered[at : at + len(ex)] = True
        spans.append((at, len(ex)))
    rest = np.flatnonzero((a != b) & ~covered)
    sums: list[Checksum] = []
    i = 0
    while i < len(rest):
        lo = int(rest[i])
        j = i
        while j + 1 < len(rest) and rest[j + 1] < lo + 4:
            j += 1
        c = _checksum_at(a, b, fa, lo, int(rest[j]))
        if covered[c.at : c.at + 4].any():
            raise TemplateError("a checksum overlaps a value")
        covered[c.at : c.at + 4] = True
        sums.append(c)
        i = int(np.searchsorted(rest, c.at + 4))
    for c in sums:  # each block's checksum covers no other's (none is nested)
        if any(c.start <= d.at < c.stop for d in sums if d is not c):
            raise TemplateError("nested metadata checksums")
    tpl = Template(a, spans, sums)
    if not np.array_equal(tpl.render(vb), b):
        raise TemplateError("the template with the second sentinels is not the second file")
    return tpl
