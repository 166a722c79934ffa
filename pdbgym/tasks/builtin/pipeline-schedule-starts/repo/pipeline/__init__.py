"""pipeline: dependency graphs of build steps and their schedules."""

from pipeline.graph import CycleError, Step, topological_order
from pipeline.schedule import Slot, build_schedule, critical_path, makespan

__all__ = ["CycleError", "Slot", "Step", "build_schedule", "critical_path", "makespan", "topological_order"]
