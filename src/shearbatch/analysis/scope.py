"""Which rows of a summary table a verdict is about, and whether the campaign is finished.

- **Unplanned rows.** ``bias-extract`` marks each realization directory with ``in_plan``
  (false: a directory under the campaign root that is not in ``campaign.json``'s plan,
  e.g. left by a run with another shear grid). :func:`scope` drops those rows unless
  ``include_unplanned``, and counts them.
- **Unfinished campaigns.** A planned realization that is not done (``incomplete``: not
  started, in flight or interrupted; ``corrupt``: a damaged file that a resume redoes) is
  missing work, not a failed inference. The campaign is *unfinished* when any row is one
  of those; ``k of N planned realizations complete`` counts the ``ok`` and ``failed`` rows
  (:class:`shearbatch.analysis.progress.Progress` counts the same way). The fraction
  converged is then taken over the complete realizations, and the verdict is
  INCONCLUSIVE (:func:`shearbatch.analysis.bias.measure_bias`).
"""

from __future__ import annotations

from typing import Any

from .result import Scope

__all__ = ["COMPLETE", "MISSING", "scope"]

#: statuses of a realization whose work is done (its inference ran)
COMPLETE = ("ok", "failed")
#: statuses of planned work not done yet
MISSING = ("incomplete", "corrupt")


def _false(col: Any) -> Any:
    """Cells that say false (a bool column, or the text ``False`` / ``0``)."""
    return col.map(lambda v: v is False or str(v).strip().lower() in ("false", "0", "0.0"))


def scope(df: Any, include_unplanned: bool = False) -> tuple[Any, Scope]:
    """``(rows judged, Scope(n_unplanned, unplanned_dropped, n_planned, n_complete,
    unfinished, message))`` of a summary table (module docstring;
    :class:`shearbatch.analysis.result.Scope`)."""
    n_unplanned = 0
    if "in_plan" in df.columns:
        out = _false(df["in_plan"]).to_numpy(bool)
        n_unplanned = int(out.sum())
        if n_unplanned and not include_unplanned:
            df = df[~out].reset_index(drop=True)
    status = df["status"].fillna("").astype(str)
    n_complete = int(status.isin(COMPLETE).sum())
    n_planned = len(df)
    unfinished = bool(status.isin(MISSING).any())
    message = (f"unfinished: {n_complete} of {n_planned} planned realizations complete"
               if unfinished else "")  # fmt: skip
    return df, Scope(
        n_unplanned=n_unplanned,
        unplanned_dropped=n_unplanned if not include_unplanned else 0,
        n_planned=n_planned,
        n_complete=n_complete,
        unfinished=unfinished,
        message=message,
    )
