"""Config dataclass fields as the one declaration of a command's flags: their defaults (``defaults_of``) and
their help text (``documented``), so a command's flags take both from the config, never a copy."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from types import SimpleNamespace
from typing import ClassVar, Protocol, TypeVar, cast

T = TypeVar("T")


class DataclassType(Protocol):
    """A dataclass (the class itself or an instance): what ``dataclasses.fields`` reads."""

    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[object]]]


def documented(default: T | dataclasses._MISSING_TYPE = dataclasses.MISSING, help: str = "", *,
               factory: Callable[[], T] | None = None,
               flag: str | None = None, negates: bool = False, old_flags: tuple[str, ...] = (),
               text: tuple[Callable[[T], str], Callable[[str], T]] | None = None, cli: bool = True,
               min: float | None = None, inner: Mapping[str, str | None] | None = None) -> T:
    """A dataclass field with its help text in ``metadata["help"]`` (TRL's ``HfArgumentParser`` convention).

    The help is the flag's, as ``--help`` shows it. The rest shapes the flag when a command is built from
    the config (``config_command``): ``flag`` its own spelling (a bool so named is one-sided: ``--resume``);
    ``negates`` the flag sets the field to the opposite (``--lora`` sets ``use_dora`` False; its help says
    what the flag does); ``old_flags`` hidden spellings still read (a value given under one wins);
    ``text`` (format, parse) a flag that takes the value as text (a tuple of names as ``a,b``);
    ``cli=False`` no flag (library callers only); ``min`` the flag's ``typer.Option`` lower bound (``min=0``).
    A field whose type is a dataclass is flattened into its fields' flags; ``inner`` (field name -> help, or
    None for no flag) replaces the help those flags declare, for this config's command only.

    Typed as returning the field's value, as ``dataclasses.field`` is: the dataclass decorator replaces it.
    """
    if not help:
        raise TypeError("documented(): a field's help text is required (it is the flag's --help line)")
    option = {} if min is None else {"min": min}
    metadata = {"help": help, "cli": cli, "flag": flag, "negates": negates, "old_flags": tuple(old_flags),
                "text": text, "option": option, "inner": dict(inner or {})}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return cast(T, dataclasses.field(default=default, metadata=metadata))


def defaults_of(config_class: type[DataclassType]) -> SimpleNamespace:
    """The defaults of ``config_class``'s fields by name (``default_factory`` called); required fields are absent.

    The fields of a nested dataclass default (a config's ``episode``, ``executor``) are there by their own
    names too, as the command's flags are named (``pdbgym.commandapp.config_flags``):
    ``defaults_of(EvalConfig).turn_budget`` is ``EvalConfig().episode``'s. A config's own field wins a name.
    """
    values: dict[str, object] = {}
    nested: dict[str, object] = {}
    for spec in dataclasses.fields(config_class):
        if spec.default is not dataclasses.MISSING:
            values[spec.name] = spec.default
        elif spec.default_factory is not dataclasses.MISSING:
            values[spec.name] = spec.default_factory()
        if spec.name in values:
            nested.update(_flattened(values[spec.name]))
    return SimpleNamespace(**{**nested, **values})


def _flattened(value: object) -> dict[str, object]:
    """The fields of a dataclass instance by name, those of its own nested ones included; {} for any other value."""
    if not dataclasses.is_dataclass(value) or isinstance(value, type):
        return {}
    found: dict[str, object] = {}
    for spec in dataclasses.fields(value):
        found.update(_flattened(getattr(value, spec.name)))
    return {**found, **{spec.name: getattr(value, spec.name) for spec in dataclasses.fields(value)}}


def pick(value: T, alias: T | None) -> T:
    """The value given under a flag's old (hidden) spelling when one was given, else the new flag's value."""
    return value if alias is None else alias
