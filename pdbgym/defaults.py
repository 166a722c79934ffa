"""Reading a config dataclass's defaults, so a command's flags take them from the config, not a copy."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

from pdbgym.episode_defaults import EpisodeSettings


def defaults_of(config_class: type[Any]) -> SimpleNamespace:
    """The defaults of ``config_class``'s fields by name (``default_factory`` called); required fields are absent.

    The fields of a nested ``EpisodeSettings`` (a config's ``episode``) are there by their own names too, as
    the command's flags are named: ``defaults_of(EvalConfig).turn_budget`` is ``EvalConfig().episode``'s.
    """
    values: dict[str, Any] = {}
    for spec in dataclasses.fields(config_class):
        if spec.default is not dataclasses.MISSING:
            values[spec.name] = spec.default
        elif spec.default_factory is not dataclasses.MISSING:
            values[spec.name] = spec.default_factory()
        if isinstance(values.get(spec.name), EpisodeSettings):
            values.update(dataclasses.asdict(values[spec.name]))
    return SimpleNamespace(**values)


def pick(value: Any, alias: Any) -> Any:
    """The value given under a flag's old (hidden) spelling when one was given, else the new flag's value."""
    return value if alias is None else alias
