"""What a batch costs in device memory, what the device has, and how many lanes fit.

Before the first batch runs, the engine compiles its batched program for the batch's
shapes (the compile it would do at the first call anyway) and reads XLA's own buffer
assignment of it (``compiled.memory_analysis()``: arguments, outputs and temporaries).
That is the program's memory on the device, known before anything runs. The budget is
the device's free memory with headroom (a GPU's ``memory_stats``), the machine's
available RAM on a CPU, or what the user set (``--memory-budget`` /
``$SHEARBATCH_MEMORY_BUDGET``), so the same logic runs, and is tested, on a CPU.

:func:`lanes_that_fit` turns one measurement into a lane count. The memory of a batched
program is a fixed part plus a part per lane; one compiled program gives their sum, so
``total / lanes`` per lane is an upper bound on the per-lane part and the lanes it lets
through fit whatever the fixed part was.
"""

from __future__ import annotations

import logging
import os
import re
from typing import Any, NamedTuple

__all__ = [
    "HEADROOM",
    "Budget",
    "ProgramMemory",
    "fmt_bytes",
    "lanes_that_fit",
    "lanes_that_fit_line",
    "memory_budget",
    "parse_bytes",
    "program_memory",
]

logger = logging.getLogger(__name__)

#: the fraction of a device's free memory (or of the machine's available RAM) a batch may
#: plan to use: the rest is left to the runtime, fragmentation and the host's own copies
HEADROOM = 0.8

_UNITS = {"": 1, "b": 1, "k": 1e3, "kb": 1e3, "m": 1e6, "mb": 1e6, "g": 1e9, "gb": 1e9,
          "t": 1e12, "tb": 1e12, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}  # fmt: skip


def parse_bytes(text: str | int) -> int:
    """``"2GiB"``, ``"500MB"``, ``"1.5e9"``, ``4096`` -> bytes; ValueError otherwise."""
    if isinstance(text, int):
        if text <= 0:
            raise ValueError(f"a memory size must be positive, got {text}")
        return text
    m = re.fullmatch(r"\s*([0-9.]+(?:e[0-9]+)?)\s*([a-zA-Z]*)\s*", str(text))
    if not m or m[2].lower() not in _UNITS:
        raise ValueError(f"not a memory size: {text!r} (e.g. 2GiB, 500MB, 1e9)")
    n = int(float(m[1]) * _UNITS[m[2].lower()])
    if n <= 0:
        raise ValueError(f"a memory size must be positive, got {text!r}")
    return n


def fmt_bytes(n: float) -> str:
    """``1536 * 2**20`` -> ``"1.5 GiB"``."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.3g} {unit}"
    return f"{int(n)} B"


class Budget(NamedTuple):
    """Device memory a batch may use (bytes) and where the figure comes from."""

    bytes: int
    source: str


def _available_ram() -> tuple[int, str]:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024, "the machine's available RAM"
    except OSError:
        pass
    pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    return int(pages * size), "the machine's RAM"


def memory_budget(override: int | str | None = None, device: Any = None) -> Budget:
    """The memory one batch may use on ``device`` (default: JAX's first device).

    ``override`` (or ``$SHEARBATCH_MEMORY_BUDGET``): that many bytes, as set. Otherwise
    :data:`HEADROOM` of the accelerator's free memory (``memory_stats``: its limit less
    what is in use), or on a CPU (no ``memory_stats``) of the machine's available RAM.
    """
    if override is None and (env := os.environ.get("SHEARBATCH_MEMORY_BUDGET")):
        try:
            return Budget(parse_bytes(env), "set by $SHEARBATCH_MEMORY_BUDGET")
        except ValueError as err:
            raise ValueError(f"SHEARBATCH_MEMORY_BUDGET: {err}") from None
    if override is not None:
        return Budget(parse_bytes(override), "set by --memory-budget")
    import jax

    dev = device if device is not None else jax.devices()[0]
    stats = None
    try:
        stats = dev.memory_stats()
    except Exception:
        stats = None
    if stats and stats.get("bytes_limit"):
        free = int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0))
        return Budget(int(HEADROOM * free),
                      f"{HEADROOM:.0%} of {fmt_bytes(free)} free on {dev.device_kind}")  # fmt: skip
    ram, what = _available_ram()
    return Budget(int(HEADROOM * ram), f"{HEADROOM:.0%} of {what} ({fmt_bytes(ram)})")


class ProgramMemory(NamedTuple):
    """XLA's buffer assignment of one compiled batched program (bytes)."""

    lanes: int
    argument: int
    output: int
    temp: int

    @property
    def total(self) -> int:
        return self.argument + self.output + self.temp

    @property
    def per_lane(self) -> float:
        """``total / lanes``: an upper bound on what one more lane costs."""
        return self.total / max(1, self.lanes)

    def describe(self) -> str:
        return (f"{fmt_bytes(self.total)} for {self.lanes} lane(s) (arguments "
                f"{fmt_bytes(self.argument)}, outputs {fmt_bytes(self.output)}, temporaries "
                f"{fmt_bytes(self.temp)}): {fmt_bytes(self.per_lane)} per lane")  # fmt: skip


def program_memory(compiled: Any, lanes: int) -> ProgramMemory | None:
    """The :class:`ProgramMemory` of an AOT-compiled program (``jit(f).lower(...).compile()``)
    of ``lanes`` lanes; None where the backend reports none."""
    try:
        mem = compiled.memory_analysis()
    except Exception:
        mem = None
    if mem is None:
        return None
    return ProgramMemory(lanes, int(mem.argument_size_in_bytes), int(mem.output_size_in_bytes),
                         int(mem.temp_size_in_bytes))  # fmt: skip


def lanes_that_fit(mem: ProgramMemory, budget: Budget, multiple: int = 1) -> int:
    """The most lanes whose program fits ``budget`` (a multiple of ``multiple``, e.g. the
    device count or the chunk width; 0 when not even ``multiple`` lanes fit), from one
    measurement: ``mem.total`` scaled by its lanes (an upper bound per lane)."""
    n = int(budget.bytes // mem.per_lane) if mem.per_lane > 0 else 1 << 30
    return (n // multiple) * multiple


def lanes_that_fit_line(
    a: ProgramMemory, b: ProgramMemory, budget: Budget, multiple: int = 1
) -> int:
    """The most lanes that fit ``budget`` on the line through two measurements of the same
    program at different lane counts (fixed part + slope per lane), less 5% for what
    another width's buffer assignment may add; 0 when not even ``multiple`` fit."""
    if a.lanes == b.lanes:
        return lanes_that_fit(a, budget, multiple)
    slope = max((a.total - b.total) / (a.lanes - b.lanes), 1.0)
    fixed = max(0.0, b.total - slope * b.lanes)
    n = int((0.95 * budget.bytes - fixed) // slope)
    return max(0, (n // multiple) * multiple)
