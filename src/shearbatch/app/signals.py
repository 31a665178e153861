"""Stopping a run cleanly: the time limit (:func:`deadline`) and SIGINT / SIGTERM
(:class:`StopOnSignal`)."""

from __future__ import annotations

import logging
import sys
from typing import Any

from .options import PlanError

__all__ = ["StopOnSignal", "deadline"]

logger = logging.getLogger("shearbatch")

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def deadline(limit: str | None) -> float | None:
    """``time.time()`` by which this run must end: ``--time-limit`` from now, else
    ``SLURM_JOB_END_TIME`` (epoch seconds), whichever is earlier; 5 s are kept for the
    writes in flight."""
    import os
    import re
    import time

    ends = []
    if limit is not None:
        text = limit.strip().lower()
        m = re.fullmatch(r"(?:(\d+)-)?(\d+):(\d+)(?::(\d+))?", text)
        if m:
            d, a, b, c = (int(x) if x else 0 for x in m.groups())
            secs = d * 86400 + (a * 3600 + b * 60 + c if m[4] else a * 60 + b)
        elif re.fullmatch(r"\d+(\.\d*)?[smhd]?", text):
            unit = text[-1] if text[-1] in _UNITS else "s"
            secs = float(text.rstrip("smhd")) * _UNITS[unit]
        else:
            raise PlanError(
                f"--time-limit: not a duration: {limit!r} (e.g. 3600, 45m, 2h, 01:30:00)"
            )
        if secs <= 0:
            raise PlanError(f"--time-limit: must be > 0, got {limit!r}")
        ends.append(time.time() + secs)
    if env := os.environ.get("SLURM_JOB_END_TIME"):
        try:
            ends.append(float(env))
        except ValueError:
            raise PlanError(f"SLURM_JOB_END_TIME: not a time in seconds: {env!r}") from None
    return min(ends) - 5.0 if ends else None


class StopOnSignal:
    """SIGTERM / SIGINT during ``bias-run``: stop taking batches, let the writes in flight
    finish, exit ``128 + signal``.

    Python runs a signal handler only between bytecodes of the main thread, which may
    sit in a compiled JAX program for minutes; so the handler only sets ``event`` (the
    engine checks it before each batch), and a watchdog thread woken through
    ``signal.set_wakeup_fd`` (written by the C-level handler at once) ends the process
    itself with ``os._exit`` if the main thread has not returned within ``grace``
    seconds, or at a second signal. Every file is written to a temporary name and
    renamed, so an exit mid-write leaves the realization incomplete (redone on resume)
    and an orphaned temporary file that the resume removes. No exception is raised in
    the main thread: a ``KeyboardInterrupt`` inside netCDF/HDF5 (the xarray writer held
    a lock that its clean-up then waited for) is what hung Ctrl-C before.
    """

    def __init__(self, hint, grace: float = 5.0):
        import threading

        self.event, self.signum, self.name = threading.Event(), 0, ""
        self._hint, self._grace, self._returned = hint, grace, threading.Event()
        self._saved: dict[int, Any] = {}

    def __enter__(self) -> StopOnSignal:
        import signal
        import socket
        import threading

        if threading.current_thread() is not threading.main_thread():
            return self
        self._r, self._w = socket.socketpair()
        self._w.setblocking(False)
        self._old_fd = signal.set_wakeup_fd(self._w.fileno(), warn_on_full_buffer=False)
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._saved[sig] = signal.signal(sig, self._note)
        threading.Thread(target=self._watch, name="shearbatch-signals", daemon=True).start()
        return self

    def _note(self, signum: int, frame: Any) -> None:
        pass  # the watchdog acts on the byte the C-level handler wrote for this signal

    def _watch(self) -> None:
        import os
        import signal
        import time

        self._r.settimeout(0.2)
        until, why = None, ""
        while not self._returned.is_set():
            try:
                data = self._r.recv(1)
            except TimeoutError:
                if until is not None and time.monotonic() > until:
                    why = f"{self.name}: the batch in flight did not end within {self._grace:.0f} s"
                    break
                continue
            except OSError:
                return
            if not data:
                return
            if data[0] not in (signal.SIGINT, signal.SIGTERM):
                continue
            if until is not None:
                why = f"second signal ({signal.Signals(data[0]).name})"
                break
            self.signum, self.name = data[0], signal.Signals(data[0]).name
            self.event.set()
            until = time.monotonic() + self._grace
            logger.warning("%s: no new batch; waiting up to %.0f s for the batch and the writes "
                           "in flight", self.name, self._grace)  # fmt: skip
        else:
            return
        logger.warning("%s; abandoning it. %s", why, self._hint())
        for h in logging.getLogger("shearbatch").handlers:
            h.flush()
        sys.stderr.flush()
        os._exit(128 + self.signum)

    def __exit__(self, *exc: Any) -> None:
        import signal

        self._returned.set()
        if not self._saved:
            return
        signal.set_wakeup_fd(self._old_fd)
        for sig, handler in self._saved.items():
            signal.signal(sig, handler)
        self._w.close()
        self._r.close()
