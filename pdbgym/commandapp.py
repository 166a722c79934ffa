"""The one way pdbgym makes a command group, so every ``--help`` reads the same, and commands whose flags
are a config dataclass's fields (``config_command``).

Help is click's plain text, not typer's rich panels: in rich mode a help text's square brackets are
markup (``[quick]`` vanished from ``experiment run --help``) and every flag showed a ``<bool>``
placeholder as if it took a value.
"""

from __future__ import annotations

import dataclasses
import inspect
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

import typer
from typer.models import Default

from pdbgym.defaults import DataclassType

R = TypeVar("R")
T = TypeVar("T")


def command_app(*, name: str | None = None, help: str | None = None, no_args_is_help: bool | None = None,
                invoke_without_command: bool | None = None, add_completion: bool = True,
                pretty_exceptions_enable: bool = True) -> typer.Typer:
    """A ``typer.Typer`` with plain help text; the options as ``typer.Typer`` takes them. One not given stays
    typer's own default placeholder, so a group mounted with ``add_typer`` can still set it."""
    return typer.Typer(rich_markup_mode=None, name=Default(None) if name is None else name,
                       help=Default(None) if help is None else help,
                       no_args_is_help=Default(False) if no_args_is_help is None else no_args_is_help,
                       invoke_without_command=(Default(False) if invoke_without_command is None
                                               else invoke_without_command),
                       add_completion=add_completion, pretty_exceptions_enable=pretty_exceptions_enable)


@dataclass(frozen=True)
class ConfigFlag:
    """One flag of a ``config_command``: the parameter typer reads and the config field it fills.

    ``field``: the field's path from the config, one name a level (``("episode", "turn_budget")`` for a field
    of a nested dataclass)."""

    field: tuple[str, ...]
    parameter: inspect.Parameter
    negates: bool = False  # the field is the flag's opposite (--lora: use_dora False)
    old_spelling: bool = False  # a hidden alias: a value given under it wins over the field's own flag
    parse: Callable[[str], object] | None = None  # the flag takes text, parsed into the field's value

    def value(self, given: object) -> object:
        """The field's value from what typer parsed for this flag."""
        if self.parse is not None and given is not None:
            return self.parse(str(given))
        return not given if self.negates else given


def config_flags(config_class: type[DataclassType]) -> list[ConfigFlag]:
    """The flags of ``config_class``'s fields, in field order: each field's help and default as declared.

    Every field needs ``metadata["help"]`` (``pdbgym.defaults.documented``) unless it says ``cli=False``:
    a field without help is a ``TypeError`` naming it, so a new field cannot slip in as an unexplained flag.
    A field whose type is a dataclass (``EpisodeSettings``, ``ExecutorConfig``) is flattened: its fields are
    flags under their own names, defaulting to the values of the field's default, their help as the nested
    class declares it unless the field's ``inner`` replaces it (or, with None, leaves that flag out).
    """
    return _flags_of(config_class, (), None, {})


def _flags_of(config_class: type[DataclassType], path: tuple[str, ...], defaults: object,
              inner: Mapping[str, str | None]) -> list[ConfigFlag]:
    """The flags of ``config_class``'s fields at ``path``; ``defaults``: the instance whose values are their
    defaults (None: the fields' own); ``inner``: help text replacing a field's own, None for no flag."""
    hints = typing.get_type_hints(config_class)
    flags: list[ConfigFlag] = []
    for spec in dataclasses.fields(config_class):
        where = f"{config_class.__name__}.{spec.name}"
        meta = dict(spec.metadata)
        if spec.name in inner:
            if inner[spec.name] is None:
                continue
            meta["help"] = inner[spec.name]
        if not meta.get("cli", True):
            continue
        if not meta.get("help"):
            raise TypeError(f"{where} has no help text: declare it with pdbgym.defaults.documented(default, "
                            "'help'), or cli=False for no flag")
        default = _default(spec) if defaults is None else getattr(defaults, spec.name)
        kind = hints[spec.name]
        if isinstance(kind, type) and dataclasses.is_dataclass(kind):
            nested = None if default is inspect.Parameter.empty else default
            flags += _flags_of(kind, (*path, spec.name), nested, meta.get("inner") or {})
        else:
            flags += _field_flags((*path, spec.name), meta, kind, default, where)
    return flags


def _field_flags(path: tuple[str, ...], meta: Mapping[str, Any], kind: type | types.UnionType, default: object,
                 where: str) -> list[ConfigFlag]:
    """The flag of one field, then its hidden old spellings; ``kind``: the field's resolved annotation."""
    name, parse = path[-1], None
    declared = () if meta.get("flag") is None else (meta["flag"],)
    if meta.get("negates"):
        if kind is not bool or not declared:
            raise TypeError(f"{where}: only a bool field with its own flag can be negated by it")
        name, default = _parameter_name(meta["flag"]), not default
    if meta.get("text") is not None:  # the flag takes text: the default shown as text, a value parsed back
        show, parse = meta["text"]
        kind, default = str, default if default is inspect.Parameter.empty else show(default)
    option = typer.Option(*declared, help=meta["help"], **meta.get("option", {}))
    flags = [ConfigFlag(path, _keyword(name, Annotated[kind, option], default), meta.get("negates", False),
                        parse=parse)]
    for old in meta.get("old_flags", ()):
        hidden = typer.Option(old, hidden=True)
        flags.append(ConfigFlag(path, _keyword(_parameter_name(old), Annotated[kind | None, hidden], None),
                                old_spelling=True, parse=parse))
    return flags


def config_command(config_class: type[DataclassType]) -> Callable[[Callable[..., R]], Callable[..., R]]:
    """Decorate ``run(config, **own)`` into a typer command whose flags are ``config_class``'s fields.

    The command's flags are the fields' (``config_flags``), then ``run``'s own parameters besides ``config``
    (options that are no setting of the config, such as ``--json``). Typer reads a function's signature, so
    the command is a function whose ``__signature__`` is built here; called, it makes the config from the
    flags (a bad value is refused there, by the config's own checks) and hands it to ``run``. A group's
    callback (``run`` takes a ``typer.Context``) runs only when no subcommand does: the flags are its own.
    """

    def decorate(run: Callable[..., R]) -> Callable[..., R]:
        flags = config_flags(config_class)
        own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
               for p in inspect.signature(run, eval_str=True).parameters.values() if p.name != "config"]
        parameters = [flag.parameter for flag in flags] + own
        names = [p.name for p in parameters]
        if len(set(names)) != len(names):
            raise TypeError(f"{run.__name__}: a parameter name is used twice: {sorted(names)}")

        context = next((p.name for p in own if isinstance(p.annotation, type) and issubclass(p.annotation, typer.Context)),
                       None)

        def command(**given: object) -> R | None:
            if context is not None and getattr(given[context], "invoked_subcommand", None):
                return None  # a subcommand of the group runs, with its own flags
            values: dict[tuple[str, ...], object] = {}
            for flag in flags:  # a field's own flag comes before its old spellings: one given wins
                value = given[flag.parameter.name]
                if not flag.old_spelling or value is not None:
                    values[flag.field] = flag.value(value)
            return run(_made(config_class, values, None), **{p.name: given[p.name] for p in own})

        command.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in parameters}
        for attribute in ("__name__", "__qualname__", "__doc__", "__module__"):
            setattr(command, attribute, getattr(run, attribute))
        command.config_class = config_class  # type: ignore[attr-defined]
        return command  # type: ignore[return-value]

    return decorate


def _made(config_class: type[T], values: Mapping[tuple[str, ...], object], base: T | None) -> T:
    """``config_class`` from the flags' ``values`` (by field path): a nested dataclass is its field's default
    with the given fields replaced (``dataclasses.replace``, so its own checks run), or made from them."""
    hints = typing.get_type_hints(config_class)
    given = {path[0]: value for path, value in values.items() if len(path) == 1}
    for spec in dataclasses.fields(config_class):  # type: ignore[arg-type]
        below = {path[1:]: value for path, value in values.items() if len(path) > 1 and path[0] == spec.name}
        if below:
            default = _default(spec) if base is None else getattr(base, spec.name)
            given[spec.name] = _made(hints[spec.name], below, None if default is inspect.Parameter.empty else default)
    return config_class(**given) if base is None else dataclasses.replace(base, **given)  # type: ignore[type-var]


def _default(spec: dataclasses.Field[object]) -> object:
    if spec.default is not dataclasses.MISSING:
        return spec.default
    if spec.default_factory is not dataclasses.MISSING:
        return spec.default_factory()
    return inspect.Parameter.empty  # a required flag


def _keyword(name: str, annotation: object, default: object) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation, default=default)


def _parameter_name(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")
