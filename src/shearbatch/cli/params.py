"""Parameter types and ``--version`` shared by the commands."""

from __future__ import annotations

import sys
from typing import Any

import click

__all__ = ["BATCH_SIZE", "_version_option"]


def _version_message() -> str:
    from importlib.metadata import PackageNotFoundError, version

    from .._version import __version__

    def v(pkg: str) -> str:
        try:
            return version(pkg)
        except PackageNotFoundError:
            return "not installed"

    deps = ", ".join(f"{p} {v(p)}" for p in ("jax", "numpyro", "arviz"))
    return f"%(prog)s (shearbatch {__version__}; {deps}; python {sys.version.split()[0]})"


def _version_option() -> Any:
    return click.version_option(
        None, "--version", message=_version_message(), help="Show the versions and exit."
    )


class _BatchSize(click.ParamType):
    """``--batch-size``: a number of lanes >= 1, or ``auto``."""

    name = "N|auto"

    def convert(self, value: Any, param: Any, ctx: Any) -> int | str:
        if isinstance(value, int) or value is None:
            return value
        text = str(value).strip().lower()
        if text == "auto":
            return "auto"
        try:
            return int(text)
        except ValueError:
            self.fail(f"auto or a number of realizations >= 1, got {value!r}", param, ctx)


BATCH_SIZE = _BatchSize()
