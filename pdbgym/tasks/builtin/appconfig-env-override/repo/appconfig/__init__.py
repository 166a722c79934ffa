"""appconfig: defaults < INI file < APP_* environment variables."""

from appconfig.loader import ConfigError, load_settings
from appconfig.settings import Settings

__all__ = ["ConfigError", "Settings", "load_settings"]
