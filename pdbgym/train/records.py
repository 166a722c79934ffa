"""What more than one training stage shares: a logged step's row, a recipe's setting, SFT's progress hook."""

from __future__ import annotations

from collections.abc import Callable

# One setting of a run as its recipe records it (``GRPORunConfig.recipe``).
Setting = str | int | float | bool | None
# One logged optimizer step as metrics.jsonl (SFT) and steps.jsonl (GRPO) keep it: ``step`` and the values
# ``Trainer.log`` was handed (a ``dict[str, float]`` in transformers and TRL).
LogRow = dict[str, float]
# SFT's progress hook: (a logged row with its step, total optimizer steps); also called once as training
# begins with {"step": the step it starts from}, so a display knows the total before the first step.
LogHook = Callable[[LogRow, int], None]
