"""Read the layers and turn their text values into typed settings."""

from __future__ import annotations

import configparser
from collections.abc import Mapping
from typing import Any

from appconfig.schema import FALSE_WORDS, SCHEMA, TRUE_WORDS, defaults
from appconfig.settings import Settings

ENV_PREFIX = "APP_"


class ConfigError(ValueError):
    """A configuration value is unknown or malformed."""


def read_ini(text: str) -> dict[str, str]:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read_string(text)
    values = {}
    for section in parser.sections():
        for option, raw in parser.items(section):
            key = f"{section.lower()}.{option}"
            if key not in SCHEMA:
                raise ConfigError(f"unknown setting '{key}' in [{section}]")
            values[key] = raw
    return values


def read_env(environ: Mapping[str, str]) -> dict[str, str]:
    """APP_SERVER__PORT=9000 -> {'server.port': '9000'}; other variables are ignored."""
    values = {}
    for name, raw in environ.items():
        if not name.startswith(ENV_PREFIX):
            continue
        key = name[len(ENV_PREFIX):].lower().replace("__", ".")
        if key in SCHEMA:
            values[key] = raw
    return values


def coerce(key: str, value: Any) -> Any:
    kind, _ = SCHEMA[key]
    if not isinstance(value, str) or kind is str:
        return value
    text = value.strip().lower()
    if kind is bool:
        if text in TRUE_WORDS:
            return True
        if text in FALSE_WORDS:
            return False
        raise ConfigError(f"setting '{key}' must be a yes/no value, got {value!r}")
    try:
        return kind(text)
    except ValueError:
        raise ConfigError(f"setting '{key}' must be {kind.__name__}, got {value!r}") from None


def load_settings(ini_text: str = "", environ: Mapping[str, str] | None = None) -> Settings:
    """Merge the layers (later wins) and build Settings."""
    merged = defaults()
    merged.update(read_ini(ini_text))
    typed = {key: coerce(key, value) for key, value in merged.items()}
    typed.update(read_env(environ or {}))
    return Settings.from_flat(typed)
