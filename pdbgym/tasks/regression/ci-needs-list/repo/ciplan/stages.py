"""Plan jobs into stages: every job runs in the first stage after all the jobs it needs."""

from __future__ import annotations

from ciplan.graph import DependencyCycle, dependency_graph, find_cycle
from ciplan.pipeline_file import parse_pipeline


def plan_stages(graph: dict[str, set[str]]) -> list[list[str]]:
    """Stages of job names (sorted within a stage); jobs in one stage can run in parallel."""
    cycle = find_cycle(graph)
    if cycle:
        raise DependencyCycle(" -> ".join(cycle))
    stage_of: dict[str, int] = {}
    remaining = dict(graph)
    while remaining:
        ready = [name for name, needs in remaining.items() if needs <= stage_of.keys()]
        for name in ready:
            stage_of[name] = 1 + max((stage_of[n] for n in remaining[name]), default=-1)
            del remaining[name]
    stages: list[list[str]] = [[] for _ in range(1 + max(stage_of.values(), default=-1))]
    for name, stage in stage_of.items():
        stages[stage].append(name)
    return [sorted(stage) for stage in stages]


def plan_file(text: str) -> list[list[str]]:
    """Stages for a pipeline file's text."""
    return plan_stages(dependency_graph(parse_pipeline(text)))
