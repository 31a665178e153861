"""The strict config schema: pydantic models, YAML loading, defaults.

Only :mod:`shearbatch.spec` (and the CLI) read it; everything below works on
the plain values that ``spec`` makes of it.
"""

from .config import (
    DIST_TYPES,
    CampaignConfig,
    Config,
    ConfigError,
    Fixed,
    LogNormal,
    Normal,
    TruncatedNormal,
    Uniform,
    config_hash,
    current_config,
    load_config,
    parse_config,
    read_config_data,
)

__all__ = [
    "DIST_TYPES",
    "CampaignConfig",
    "Config",
    "ConfigError",
    "Fixed",
    "LogNormal",
    "Normal",
    "TruncatedNormal",
    "Uniform",
    "config_hash",
    "current_config",
    "load_config",
    "parse_config",
    "read_config_data",
]
