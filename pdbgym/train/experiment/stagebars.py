"""Progress of an experiment's long stages on the command's progress bars (``pdbgym.progress``)."""

from __future__ import annotations

from collections.abc import Callable

from pdbgym.progress import TaskSet
from pdbgym.train.records import LogHook


class StageBars:
    """Progress of the long stages (oracle episodes, SFT steps, held-out episodes) on a ``pdbgym.progress``
    task set; without one, hooks that do nothing."""

    def __init__(self, bars: TaskSet | None = None) -> None:
        self.bars = bars

    def episodes(self, name: str) -> tuple[Callable[[int, int], None], Callable[..., None]]:
        """(on_plan, on_each) hooks of a cache build or a campaign: a bar of its episodes."""
        bars = self.bars
        if bars is None:
            return (lambda done, to_play: None), (lambda *_: None)
        bar = bars.add_task(name, total=None)
        return (lambda done, to_play: bars.update(bar, total=done + to_play, completed=done)), \
            (lambda *_: bars.advance(bar))

    def steps(self, name: str) -> LogHook | None:
        """``train_sft``'s on_log hook: a bar of its optimizer steps."""
        bars = self.bars
        if bars is None:
            return None
        bar = bars.add_task(name, total=None)
        return lambda row, total: bars.update(bar, total=total, completed=row.get("step", 0))
