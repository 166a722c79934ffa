"""Read pipeline files::

    [build]
    run = make
    [test]
    run = pytest
    needs = build, lint

``needs`` is a comma-separated list of job names (spaces around commas are optional).
"""

from __future__ import annotations

from dataclasses import dataclass


class PipelineSyntaxError(ValueError):
    """A pipeline file line that cannot be read."""


@dataclass(frozen=True)
class Job:
    name: str
    run: str
    needs: tuple[str, ...]


def _needs(value: str) -> tuple[str, ...]:
    return tuple(name for name in value.strip().split(", ") if name)


def parse_pipeline(text: str, origin: str = "pipeline.ini") -> list[Job]:
    """Jobs in file order; every job needs a ``run`` command."""
    fields: dict[str, dict[str, str]] = {}
    current: str | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = line[1:-1].strip()
            fields[current] = {}
        elif "=" in line and current is not None:
            key, _, value = line.partition("=")
            fields[current][key.strip()] = value.strip()
        else:
            raise PipelineSyntaxError(f"{origin}:{number}: expected '[job]' or 'key = value', got {raw!r}")
    missing = [name for name, values in fields.items() if "run" not in values]
    if missing:
        raise PipelineSyntaxError(f"{origin}: jobs without a 'run' command: {missing}")
    return [Job(name, values["run"], _needs(values.get("needs", ""))) for name, values in fields.items()]
