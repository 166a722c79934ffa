"""The valid tool-call rate of each arm, read from a campaign's transcripts with the loop's own parser."""

from __future__ import annotations

import numpy as np
import pytest
from campaignfixtures import ARMS, REAL_TURNS, TASKS, write_campaign

from pdbgym.evaluate import stats
from pdbgym.evaluate.arm_figures import tool_call_validity


def test_valid_call_rate_has_an_interval_clustered_by_episode(tmp_path):
    write_campaign(tmp_path / "eval", REAL_TURNS, {"oracle": 5})
    validity = tool_call_validity(tmp_path / "eval", ARMS)
    sft = validity["sft-best"]
    shares = [1.0, 3 / 4, 3 / 4, 1.0, 2 / 3]  # each episode's valid turns / turns
    assert (sft["turns"], sft["valid"], sft["episodes_with_valid"]) == (21, 18, 5)
    assert sft["rate"] == pytest.approx(18 / 21)  # pooled
    assert sft["episode_rate"] == stats.estimate_mean(np.array(shares), max_n=21).to_dict()
    assert sft["longest_repeat"] == 8 and validity["oracle"]["longest_repeat"] == 1
    # Eight copies of one call count as one episode, not as eight independent turns: the interval is wider
    # than a Wilson interval that takes the 21 turns as independent trials.
    low, high = sft["episode_rate"]["ci"]
    turn_low, turn_high = stats.wilson_interval(18 / 21, 21)
    assert high - low > turn_high - turn_low
    # No valid call at all still has an interval (Wilson at 0/5 episodes), not the point [0, 0].
    base = validity["base"]["episode_rate"]
    assert base["mean"] == 0 and base["ci"][0] == 0 and base["ci"][1] > 0.3
    assert sft["per_task_rate"] == dict(zip(TASKS, shares, strict=True))
