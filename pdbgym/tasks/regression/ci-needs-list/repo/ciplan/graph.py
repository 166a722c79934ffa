"""Job dependency graphs."""

from __future__ import annotations

from ciplan.pipeline_file import Job


class UnknownJob(KeyError):
    """A job needs a job that the pipeline does not define."""


class DependencyCycle(ValueError):
    """Jobs that need each other, directly or through others."""


def dependency_graph(jobs: list[Job]) -> dict[str, set[str]]:
    """job name -> names of the jobs it needs; every needed name must be a defined job."""
    defined = {job.name for job in jobs}
    graph = {}
    for job in jobs:
        for needed in job.needs:
            if needed not in defined:
                raise UnknownJob(f"job {job.name!r} needs {needed!r}, which the pipeline does not define "
                                 f"(defined: {', '.join(sorted(defined))})")
        graph[job.name] = set(job.needs)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One dependency cycle as a list of job names (first repeated at the end), or None."""
    state: dict[str, str] = {}

    def visit(name: str, path: list[str]) -> list[str] | None:
        state[name] = "open"
        for needed in sorted(graph[name]):
            if state.get(needed) == "open":
                return path[path.index(needed):] + [needed]
            if needed not in state and (cycle := visit(needed, [*path, needed])):
                return cycle
        state[name] = "done"
        return None

    for name in sorted(graph):
        if name not in state and (cycle := visit(name, [name])):
            return cycle
    return None
