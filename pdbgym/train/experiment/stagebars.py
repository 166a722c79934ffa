"""Progress of an experiment's long stages on the command's progress bars (``pdbgym.progress``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class StageBars:
    """Progress of the long stages (oracle episodes, SFT steps, held-out episodes) on a ``pdbgym.progress``
    task set; without one, hooks that do nothing."""

    def __init__(self, bars: Any = None) -> None:
        self.bars = bars

    def episodes(self, name: str) -> tuple[Callable[[int, int], None], Callable[..., None]]:
        """(on_plan, on_each) hooks of a cache build or a campaign: a bar of its episodes."""
        if self.bars is None:
            return (lambda done, to_play: None), (lambda *_: None)
        bar = self.bars.add_task(name, total=None)
        return (lambda done, to_play: self.bars.update(bar, total=done + to_play, completed=done)), \
            (lambda *_: self.bars.advance(bar))

    def steps(self, name: str) -> Callable[[dict[str, Any], int], None] | None:
        """``train_sft``'s on_log hook: a bar of its optimizer steps."""
        if self.bars is None:
            return None
        bar = self.bars.add_task(name, total=None)
        return lambda row, total: self.bars.update(bar, total=total, completed=row.get("step", 0))
