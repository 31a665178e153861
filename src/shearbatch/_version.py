"""The installed package's version, in a module of its own: the modules that record it
(writer, manifest, engine, CLI) import it from here, not from the package's
``__init__``, whose lazy attributes import the API (which would close an import cycle)."""

from importlib.metadata import PackageNotFoundError, version

__all__ = ["__version__"]

try:
    __version__ = version("shearbatch")
except PackageNotFoundError:  # pragma: no cover - source tree without install
    __version__ = "0.0.0+unknown"
