"""Files: the campaign layout, atomic writers and readers. Nothing else knows a file name."""

from .layout import (
    CONVERGENCE,
    FILES,
    POSTERIOR,
    TRUTH,
    Inspection,
    find_realization_dirs,
    inspect_planned,
    inspect_realization,
    netcdf_problem,
    realization_status,
)
from .writer import (
    Record,
    WriteError,
    WriterPool,
    clean_orphans,
    read_json,
    read_posterior,
    to_strict_json,
    write_json,
    write_realization,
    write_record,
)

__all__ = [
    "CONVERGENCE",
    "FILES",
    "POSTERIOR",
    "TRUTH",
    "Inspection",
    "Record",
    "WriteError",
    "WriterPool",
    "clean_orphans",
    "find_realization_dirs",
    "inspect_planned",
    "inspect_realization",
    "netcdf_problem",
    "read_json",
    "read_posterior",
    "realization_status",
    "to_strict_json",
    "write_json",
    "write_realization",
    "write_record",
]
