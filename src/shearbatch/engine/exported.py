"""Programs that a later process loads instead of tracing: serialized ``jax.export`` modules.

JAX's persistent compilation cache (:mod:`shearbatch.engine.runtime`) shares a campaign's XLA
executables between processes, but it is keyed by the *lowered* module: every new
process of the same campaign (a SLURM array task, a resume) still traces the batched
inference program in Python and lowers it before it can look the executable up. At
Level 2 on the 2-core CPU that trace and lowering were most of a second process's first
batch (12.9 s of "inference" against 5.3 s for a warm batch).

:func:`exportable` wraps the builder of a jitted program. Once an entry point has
pointed it at a store (:func:`use`: ``runtime.configure`` does, with
``<compilation cache>/exported``), the first process to run the program for given input
shapes exports it (``jax.export``: the one trace and lowering a plain ``jit`` would
do), writes the serialized module to ``<store>/<key>.bin`` (a temporary file renamed
into place, so a reader never sees half a file) and runs ``jit(exported.call)``. A
later process with the same key reads the file and runs the same ``jit(exported.call)``:
no trace of the model, a lowering that only wraps the stored module, and an XLA module
identical to the first process's, so its compile is a persistent-cache hit.

The key (:func:`program_key`) hashes everything that changes the program: what the
caller names (the model problem, method and its settings, lane chunk), the inputs'
shapes and dtypes (lanes, stamps, x64), the JAX / jaxlib / NumPyro / Optax versions,
the JAX flags that change tracing, the backend and device kind, and the source of every
module of the ``shearbatch`` package, so that an edited model is never served a stale
program. The outputs' NamedTuples (``Draws`` and each method's ``Info``) are registered
for serialization under their import path (only ``shearbatch`` classes are imported
back).

Nothing here can fail a run: no store, ``SHEARBATCH_EXPORT=off``, an export JAX refuses
(e.g. a custom call without a stability guarantee), an unwritable store, a corrupt,
truncated or foreign file, or a module that does not lower on this backend each fall
back to the plain ``jit`` with one log line (a bad file is exported and written again).
The multi-device ``shard_map`` program (:func:`shearbatch.core.batching.batched` with a
mesh) is never exported: the engine builds it with ``jit`` as before.
"""

from __future__ import annotations

import collections
import functools
import hashlib
import importlib
import json
import logging
import os
import struct
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import jax

from ..jax_setup import TRACE_FLAGS, flag_values

__all__ = [
    "ENV",
    "FORMAT",
    "STATS",
    "SUBDIR",
    "Exportable",
    "clear_memory",
    "code_of",
    "enabled",
    "exportable",
    "program_key",
    "source_hash",
    "store",
    "stored_in",
    "use",
]

logger = logging.getLogger(__name__)

#: the environment variable that turns the mechanism off (``off``, ``0``, ``false``, ``no``)
ENV = "SHEARBATCH_EXPORT"
#: the store's directory name under the compilation cache (runtime.configure)
SUBDIR = "exported"
#: the file layout below; a file of another layout is exported again
FORMAT = 1
_MAGIC = b"shearbatch-exported\n"

#: events since the process started (or :func:`clear_memory`): programs ``exported``
#: (traced here and written), ``loaded`` (read from the store, not traced), ``fallback``
#: (run with the plain jit although a store was set)
STATS: collections.Counter[str] = collections.Counter()

_STORE: dict[str, Path | None] = {"dir": None}
#: (store, key) -> compiled program / deserialized module, shared by every Exportable of
#: the process (``build_program`` twice in one process compiles once)
_MEMO_SIZE = 16
_COMPILED: collections.OrderedDict[tuple[Path, str], Any] = collections.OrderedDict()
_EXPORTED: collections.OrderedDict[tuple[Path, str], Any] = collections.OrderedDict()
_REGISTERED: dict[type, str] = {}


def stored_in() -> Path | None:
    """The directory set by :func:`use` (whatever ``$SHEARBATCH_EXPORT`` says)."""
    return _STORE["dir"]


def use(directory: str | Path | None) -> None:
    """Keep exported programs in ``directory`` (None: nowhere, every program is traced
    with ``jit``). Set by :func:`shearbatch.engine.runtime.configure`. (Core's generator and
    residual check are wrapped with :func:`exportable` where the engine hands it down as
    their ``store``: :mod:`shearbatch.core.programs`.)"""
    _STORE["dir"] = None if directory is None else Path(directory)
    if directory is not None and enabled() and not _serializable():
        logger.info("no exported programs: the flatbuffers package that jax.export needs to "
                    "serialize them is not installed (every process traces its programs)")  # fmt: skip


@functools.cache
def _serializable() -> bool:
    """Whether ``jax.export`` can (de)serialize here (it needs the flatbuffers package)."""
    import importlib.util

    return importlib.util.find_spec("flatbuffers") is not None


def enabled() -> bool:
    """False when ``$SHEARBATCH_EXPORT`` says ``off`` (``0``, ``false``, ``no``)."""
    return os.environ.get(ENV, "on").strip().lower() not in ("off", "0", "false", "no", "none")


def store() -> Path | None:
    """The directory exported programs are kept in, or None (not set, turned off, or no
    flatbuffers to serialize them with)."""
    return _STORE["dir"] if enabled() and _serializable() else None


def clear_memory() -> None:
    """Forget the programs this process compiled or read (the files stay), and the counts:
    the next call of an :class:`Exportable` behaves as in a fresh process."""
    _COMPILED.clear()
    _EXPORTED.clear()
    STATS.clear()


# --------------------------------------------------------------------------- the key


@functools.cache
def source_hash() -> str:
    """SHA-256 of every ``.py`` file of the ``shearbatch`` package (path and content), read
    once per process."""
    root = Path(__file__).resolve().parents[1]  # the package, not only its engine/
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


@functools.cache
def _versions() -> dict[str, str | None]:
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {"jax": jax.__version__}
    for name in ("jaxlib", "numpyro", "optax"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def _environment() -> dict[str, Any]:
    dev = jax.devices()[0]
    # a program traced under other flag values is another program
    flags = {name: str(v) for name, v in flag_values(TRACE_FLAGS).items()}
    return {**_versions(), "backend": jax.default_backend(), "platform": dev.platform,
            "device_kind": dev.device_kind, "flags": flags}  # fmt: skip


def _canon(x: Any) -> Any:
    """A JSON-ready, order-independent rendering of settings (NamedTuples with their type
    and field names, dicts sorted, floats by repr so inf and nan are kept)."""
    if isinstance(x, Mapping):
        return {str(k): _canon(v) for k, v in sorted(x.items(), key=lambda kv: str(kv[0]))}
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        return {"__type__": type(x).__qualname__, **{f: _canon(getattr(x, f)) for f in x._fields}}
    if hasattr(x, "model_dump") and hasattr(type(x), "model_fields"):  # a settings model
        return {"__type__": type(x).__qualname__, **_canon(x.model_dump(mode="python"))}
    if isinstance(x, list | tuple):
        return [_canon(v) for v in x]
    if isinstance(x, float):
        return repr(x)
    if x is None or isinstance(x, bool | int | str):
        return x
    return repr(x)


def code_of(fn: Callable[..., Any]) -> dict[str, str | None]:
    """What identifies ``fn``'s code in a key: its module and qualified name, and for a
    function outside ``shearbatch`` (a plugin method) the SHA-256 of its module's file
    (the package's own files are in :func:`source_hash`)."""
    import inspect

    fn = inspect.unwrap(fn)  # a wrapper (the interim model's) names what it wraps
    module = getattr(fn, "__module__", None) or ""
    out: dict[str, str | None] = {
        "function": f"{module}:{getattr(fn, '__qualname__', type(fn).__qualname__)}"
    }
    if not (module == "shearbatch" or module.startswith("shearbatch.")):
        try:
            out["file"] = hashlib.sha256(Path(inspect.getfile(fn)).read_bytes()).hexdigest()
        except (OSError, TypeError):
            out["file"] = None
    return out


def _signature(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """The inputs' pytree structure, shapes and dtypes (what a jit would re-trace on)."""
    leaves, tree = jax.tree.flatten(args)
    shapes = tuple(
        (
            tuple(getattr(a, "shape", ())),
            str(getattr(a, "dtype", "")),
            bool(getattr(a, "weak_type", False)),
        )
        for a in leaves
    )
    return str(tree), shapes


def program_key(what: Mapping[str, Any], args: tuple[Any, ...]) -> str:
    """The store key of the program described by ``what`` (its settings) called on
    ``args``: see the module's docstring for what it covers."""
    parts = {"format": FORMAT, "what": _canon(what), "args": _canon(_signature(args)),
             "env": _environment(), "source": source_hash()}  # fmt: skip
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


# --------------------------------------------------------------------------- the file


def _node_types(*trees: Any) -> set[type]:
    """Every node type of the pytree structures ``trees``."""
    out, stack = set(), list(trees)
    while stack:
        t = stack.pop()
        if (node := t.node_data()) is not None:
            out.add(node[0])
        stack.extend(t.children())
    return out


def _register(nodetype: type) -> str:
    """Register the NamedTuple ``nodetype`` for serialization; returns its serialized name."""
    if nodetype in _REGISTERED:
        return _REGISTERED[nodetype]
    name = f"{nodetype.__module__}:{nodetype.__qualname__}"
    try:
        jax.export.register_namedtuple_serialization(nodetype, serialized_name=name)
    except ValueError:  # already registered (by another copy of this module, or JAX)
        pass
    _REGISTERED[nodetype] = name
    return name


def _namedtuples(exp: Any) -> list[str]:
    """Register the NamedTuples of ``exp``'s inputs and outputs; their import paths."""
    return sorted(
        _register(t)
        for t in _node_types(exp.in_tree, exp.out_tree)
        if issubclass(t, tuple) and hasattr(t, "_fields")
    )


def _import_class(path: str) -> type:
    module, _, qualname = path.partition(":")
    if not (module == "shearbatch" or module.startswith("shearbatch.")):
        raise ValueError(f"not a shearbatch class: {path}")
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _write(path: Path, key: str, name: str, exp: Any) -> None:
    """``exp`` serialized with its header, into ``path`` by a temporary file and a rename
    (:func:`shearbatch.io.atomic.write_bytes`)."""
    namedtuples = _namedtuples(exp)  # registered before serializing
    payload = bytes(exp.serialize())
    header = {"format": FORMAT, "key": key, "program": name, "jax": jax.__version__,
              "namedtuples": namedtuples, "sha256": hashlib.sha256(payload).hexdigest(),
              "bytes": len(payload)}  # fmt: skip
    head = json.dumps(header).encode()
    from ..io import atomic  # the one atomic write (fsynced: a cache entry outlives the run)

    atomic.remove_orphans(path.parent, (path.name,))  # of this program, by killed processes
    atomic.write_bytes(path, _MAGIC + struct.pack("<I", len(head)) + head + payload)


def _read(path: Path, key: str) -> Any:
    """The exported module in ``path``, checked against ``key`` (raises ValueError on
    anything that is not this program's file)."""
    data = path.read_bytes()
    if not data.startswith(_MAGIC) or len(data) < len(_MAGIC) + 4:
        raise ValueError("not an exported-program file")
    (n,) = struct.unpack("<I", data[len(_MAGIC) : len(_MAGIC) + 4])
    start = len(_MAGIC) + 4
    header = json.loads(data[start : start + n])
    payload = data[start + n :]
    if header.get("format") != FORMAT or header.get("key") != key:
        raise ValueError(f"written for another program or layout ({header.get('key')}, "
                         f"format {header.get('format')})")  # fmt: skip
    if header.get("jax") != jax.__version__:
        raise ValueError(f"written by JAX {header.get('jax')}, this is {jax.__version__}")
    if len(payload) != header.get("bytes") or hashlib.sha256(payload).hexdigest() != header.get(
        "sha256"
    ):
        raise ValueError("truncated or corrupt (checksum mismatch)")
    for cls in header.get("namedtuples", []):
        _register(_import_class(cls))
    return jax.export.deserialize(bytearray(payload))


# --------------------------------------------------------------------------- the program


def _remember(memo: collections.OrderedDict, key: tuple[Path, str], value: Any) -> Any:
    memo[key] = value
    memo.move_to_end(key)
    while len(memo) > _MEMO_SIZE:
        memo.popitem(last=False)
    return value


class Exportable:
    """A jitted program (``build()``, built on first need) that is exported to, or loaded
    from, the store when one is set (:func:`use`). Call it like the jitted program;
    ``lower(*args)`` lowers it (the exported form when there is one), e.g. for
    ``.compile()`` ahead of time."""

    def __init__(self, build: Callable[[], Any], what: Mapping[str, Any], name: str):
        self.build, self.what, self.name = build, dict(what), name
        self._jit: Any = None
        self._ready: dict[tuple[Any, ...], Callable[..., Any]] = {}

    def plain(self) -> Any:
        """The program as a plain ``jit`` (built on first use)."""
        if self._jit is None:
            self._jit = self.build()
        return self._jit

    def __call__(self, *args: Any) -> Any:
        return self._resolve(args)(*args)

    def lower(self, *args: Any) -> Any:
        """``jit(exported.call).lower(*args)``, or the plain jit's lowering (no store,
        or a fallback)."""
        if (directory := store()) is None:
            return self.plain().lower(*args)
        try:
            key = program_key(self.what, args)
        except Exception as err:
            self._fallback(f"no key ({_short(err)})")
            return self.plain().lower(*args)
        exp = self._exported(directory, key, args)
        if exp is not None:
            try:
                return jax.jit(exp.call).lower(*args)
            except Exception as err:
                self._fallback(f"its exported form does not lower ({_short(err)})")
        return self.plain().lower(*args)

    def _resolve(self, args: tuple[Any, ...]) -> Callable[..., Any]:
        directory = store()
        if directory is None:
            return self.plain()
        sig = (directory, _signature(args))
        if (fn := self._ready.get(sig)) is None:
            fn = self._ready[sig] = self._compiled(directory, args) or self.plain()
        return fn

    def _compiled(self, directory: Path, args: tuple[Any, ...]) -> Any:
        try:
            key = program_key(self.what, args)
        except Exception as err:
            self._fallback(f"no key ({_short(err)})")
            return None
        if (fn := _COMPILED.get((directory, key))) is not None:
            return fn
        exp = self._exported(directory, key, args)
        if exp is None:
            return None
        try:
            fn = jax.jit(exp.call).lower(*args).compile()
        except Exception as err:
            self._fallback(f"its exported form does not compile here ({_short(err)})")
            return None
        return _remember(_COMPILED, (directory, key), fn)

    def _exported(self, directory: Path, key: str, args: tuple[Any, ...]) -> Any:
        """The exported module of ``key``: this process's, the store's, or exported now
        (and written); None when it cannot be exported."""
        if (exp := _EXPORTED.get((directory, key))) is not None:
            return exp
        path = directory / f"{key}.bin"
        if path.exists():
            t0 = time.perf_counter()
            try:
                exp = _read(path, key)
            except Exception as err:
                logger.warning("%s: the exported program %s cannot be used (%s): tracing it "
                               "again", self.name, path, _short(err))  # fmt: skip
            else:
                STATS["loaded"] += 1
                logger.info("%s: loaded the program exported by an earlier process (%s, "
                            "%.2f s; not traced)", self.name, path.name,
                            time.perf_counter() - t0)  # fmt: skip
                return _remember(_EXPORTED, (directory, key), exp)
        t0 = time.perf_counter()
        try:
            exp = jax.export.export(self.plain())(*args)
        except Exception as err:
            self._fallback(f"it cannot be exported ({_short(err)})")
            return None
        STATS["exported"] += 1
        try:
            _write(path, key, self.name, exp)
        except Exception as err:
            logger.warning("%s: traced in %.1f s; not stored for later processes (%s)",
                           self.name, time.perf_counter() - t0, _short(err))  # fmt: skip
        else:
            logger.info("%s: traced in %.1f s and exported for later processes (%s)",
                        self.name, time.perf_counter() - t0, path)  # fmt: skip
        return _remember(_EXPORTED, (directory, key), exp)

    def _fallback(self, why: str) -> None:
        STATS["fallback"] += 1
        logger.warning("%s: %s; traced with jit instead", self.name, why)


def exportable(build: Callable[[], Any], what: Mapping[str, Any], name: str) -> Exportable:
    """The program ``build()`` returns (a ``jax.jit``-wrapped function) as an
    :class:`Exportable` keyed by ``what`` (everything its trace depends on besides the
    inputs' shapes and dtypes, the library versions and the package's source); ``name``
    names it in log lines."""
    return Exportable(build, what, name)


def _short(err: BaseException) -> str:
    text = f"{type(err).__name__}: {err}".strip()
    line = text.splitlines()[0] if text else type(err).__name__
    return line if len(line) <= 200 else line[:197] + "..."
