"""How far apart two results of the same realizations are, in each quantity's own units.

Two separately compiled programs that should give the same answer (another chunk
width or lane count, another device, a batch against a realization run alone)
round differently: XLA vectorises each shape its own way, and another CPU's
instruction mix rounds differently again. Their difference is meaningful only in
the units of what is compared:

- draws and modes in posterior standard deviations (each lane's own draw std of
  the site): at Level 0's S/N (~1e5) g's sd is ~2e-5, so a rounding shift of
  3e-16 is ~1e-11 sd, while a defect that mixed two lanes up is > 1e3 sd;
- per-draw statistics and float ``info`` leaves relative to max(1, |value|)
  (potentials ~1e3-1e4, Laplace log q, widths);
- ``info`` leaves that already carry their units absolutely
  (:data:`ABSOLUTE_INFO`: the whitened gradient in posterior sd, the Newton
  decrement in log density). The raw gradient at a mode has no stable value
  (rounding amplified by the curvature, ~S/N^2) and is not compared;
- flags exactly, and step counts to within a step (a stopping threshold met by
  two roundings one step apart).

Bit-identity is the stronger promise where the program is the same (same lane
count, same chunk width, same device): test that with ``np.array_equal``, not
with this.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import numpy as np

__all__ = ["ABSOLUTE_INFO", "TELEMETRY_INFO", "Agreement", "agreement"]

#: ``info`` leaves compared absolutely: they are already in posterior-sd or log-density units
ABSOLUTE_INFO = ("grad_norm_whitened", "decrement")

#: ``info`` leaves that record how a batch ran, not a realization's result (MAP's
#: refilled loops: :func:`shearbatch.core.methods.map.fit_batch`): not compared
TELEMETRY_INFO = ("lane_steps", "refill_lanes")


def _results(info: Any) -> Any:
    """``info`` without its :data:`TELEMETRY_INFO` leaves."""
    fields = getattr(info, "_fields", ())
    drop = {k: None for k in TELEMETRY_INFO if k in fields}
    return info._replace(**drop) if drop else info


class Agreement(NamedTuple):
    """Largest differences between two :class:`~shearbatch.core.methods.base.Draws`."""

    max_diff_sd: float  # draws and modes, in posterior standard deviations
    max_rel_diff: float  # per-draw stats and float info, relative to max(1, |ref|)
    max_abs_info_diff: float  # ABSOLUTE_INFO leaves (posterior sd / log density)
    flags_equal: bool  # boolean leaves identical
    max_steps_diff: int  # integer leaves (step counts)

    def within(self, sd: float = 1e-6, rel: float = 1e-9, steps: int = 1) -> bool:
        """True when the two agree to rounding: ``sd`` posterior sd for draws, modes and
        the whitened gradient, ``rel`` for the rest, ``steps`` for step counts."""
        return (
            self.max_diff_sd <= sd
            and self.max_rel_diff <= rel
            and self.max_abs_info_diff <= sd
            and self.flags_equal
            and self.max_steps_diff <= steps
        )


def _max(x: np.ndarray) -> float:
    return float(np.nanmax(x, initial=0.0))


def agreement(out: Any, ref: Any) -> Agreement:
    """Compare ``out`` with ``ref``: two ``Draws`` of the same lanes (leading axis B,
    draws laid out ``(B, chain, draw, ...)``, modes ``(B, ...)``). Sites whose draws do
    not spread (sd 0) are compared absolutely."""
    sd_diff = 0.0
    for site, a in out.samples.items():
        b, a = np.asarray(ref.samples[site], float), np.asarray(a, float)
        sd = np.std(b, axis=(1, 2), keepdims=True)  # per lane and element
        scale = np.where(sd > 0, sd, 1.0)
        sd_diff = max(sd_diff, _max(np.abs(a - b) / scale))
        if site in out.mode:
            mode_a, mode_b = np.asarray(out.mode[site], float), np.asarray(ref.mode[site], float)
            sd_diff = max(sd_diff, _max(np.abs(mode_a - mode_b) / scale[:, 0, 0]))
    rel_diff, abs_diff, flags, steps = 0.0, 0.0, True, 0
    for group in ("stats", "info"):
        pairs = zip(
            jax.tree_util.tree_flatten_with_path(_results(getattr(out, group)))[0],
            jax.tree.leaves(_results(getattr(ref, group))),
            strict=True,
        )
        for (path, a), b in pairs:
            a, b = np.asarray(a), np.asarray(b)
            name = getattr(path[0], "name", getattr(path[0], "key", ""))  # a field of Info
            if a.dtype == bool:
                flags &= bool(np.array_equal(a, b))
            elif not np.issubdtype(a.dtype, np.floating):
                steps = max(steps, int(np.max(np.abs(a.astype(int) - b.astype(int)), initial=0)))
            elif group == "info" and name in ABSOLUTE_INFO:
                abs_diff = max(abs_diff, _max(np.abs(a - b)))
            else:
                with np.errstate(invalid="ignore"):  # equal infinities (a -inf log weight)
                    d = np.where(a == b, 0.0, np.abs(a - b))
                rel_diff = max(rel_diff, _max(d / np.maximum(1.0, np.abs(b))))
    return Agreement(sd_diff, rel_diff, abs_diff, flags, steps)
