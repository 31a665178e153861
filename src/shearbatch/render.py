"""Public alias of :mod:`shearbatch.core.render` (``shearbatch.render.draw_galaxy``)."""

from .core.render import *  # noqa: F403
from .core.render import __all__  # noqa: F401
