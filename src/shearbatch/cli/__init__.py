"""Thin click layer: ``bias-run``, ``bias-extract``, ``bias-stats``.

Each command lives in its own module (:mod:`.run`, :mod:`.extract`, :mod:`.stats`) and only
parses, calls the application layer (:mod:`shearbatch.app`), prints and maps exceptions to
exit codes; :mod:`.options` holds what they share. A command's module is imported when the
command is first asked for (``shearbatch.cli.bias_stats``, the console script's entry
point), so ``bias-extract`` and ``bias-stats`` never load ``bias-run``'s options, nor
through them JAX or the engine.

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
``bias-extract --verify`` (the scrub): 1 damage found, 0 none.
"""

from typing import TYPE_CHECKING, Any

from ..app import COMMANDS_FILE, apply_flags

if TYPE_CHECKING:
    from .extract import bias_extract
    from .run import bias_run
    from .stats import bias_stats

__all__ = ["COMMANDS_FILE", "apply_flags", "bias_extract", "bias_run", "bias_stats"]


def __getattr__(name: str) -> Any:
    """The three commands, each imported from its module on first use."""
    if name == "bias_run":
        from .run import bias_run

        return bias_run
    if name == "bias_extract":
        from .extract import bias_extract

        return bias_extract
    if name == "bias_stats":
        from .stats import bias_stats

        return bias_stats
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
