"""Thin click layer: ``bias-run``, ``bias-extract``, ``bias-stats``.

Each command lives in its own module (:mod:`.run`, :mod:`.extract`, :mod:`.stats`) and only
parses, calls the application layer (:mod:`shearbatch.app`), prints and maps exceptions to
exit codes; :mod:`.options` holds what they share.

Exit status: 0 success (``bias-stats``: verdict PASS); 1 some realizations of
a ``bias-run`` failed (the others are saved) or the ``bias-stats`` verdict is
FAIL; 2 bad input, reported as one line naming the offending flag or key,
before any computation starts; 3 the ``bias-stats`` verdict is INCONCLUSIVE
(the errors are too large, or too few independent seeds, to decide; the
console and ``bias_results.json`` give the realizations a decision needs).
``bias-run`` only: 3 stopped before the end of its slice because the next batch
would not finish before ``--time-limit`` / ``SLURM_JOB_END_TIME``; 4 an output
file could not be written (disk full, directory unwritable); 130 / 143 stopped by
SIGINT (Ctrl-C) / SIGTERM. In those four cases every realization is complete or
absent, and the same command resumes.
"""

from ..app import COMMANDS_FILE, apply_flags
from .extract import bias_extract
from .run import bias_run
from .stats import bias_stats

__all__ = ["COMMANDS_FILE", "apply_flags", "bias_extract", "bias_run", "bias_stats"]
