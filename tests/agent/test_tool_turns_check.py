"""A chat template that cannot lay out pdbgym's conversation is refused before any episode, by name."""

from __future__ import annotations

import copy

import pytest
from homefixtures import fresh_home

from pdbgym.agent.loop import check_tool_turns
from pdbgym.errors import PdbgymError

from modelfixtures import save_tiny_llama
from taskfixtures import make_task

DROPS_OTHER_ROLES = ("{% for m in messages %}{% if m.role in ['system', 'user', 'assistant'] %}"
                     "<|{{ m.role }}|>{{ m.content }}\n{% endif %}{% endfor %}"
                     "{% if add_generation_prompt %}<|assistant|>{% endif %}<tool_call>")
REWRITES_HISTORY = ("{% for m in messages %}<|{{ m.role }}|>"
                    "{% if m.role == 'assistant' and not loop.last %}(earlier turn){% else %}{{ m.content }}{% endif %}"
                    "\n{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}")


@pytest.fixture
def tokenizer(smol_tokenizer):
    return copy.deepcopy(smol_tokenizer)


def test_the_embedded_models_template_passes(smol_tokenizer):
    check_tool_turns(smol_tokenizer, "text", "embedded")


@pytest.mark.parametrize(("template", "fmt", "why"), [
    (None, "text", "has no chat template"),
    (DROPS_OTHER_ROLES, "hermes", "drops the 'tool' turn"),
    (REWRITES_HISTORY, "text", "does not render an assistant turn's words"),
])
def test_templates_that_cannot_carry_tool_turns_are_refused(tokenizer, template, fmt, why):
    tokenizer.chat_template = template
    with pytest.raises(PdbgymError, match=why):
        check_tool_turns(tokenizer, fmt, "the student")


def test_grpo_refuses_such_a_model_before_training(tmp_path, tokenizer, monkeypatch):
    from pdbgym.train.grpo.build import build
    from pdbgym.train.grpo.config import GRPORunConfig

    monkeypatch.setenv("PDBGYM_HOME", str(fresh_home(tmp_path / "home")))
    tokenizer.chat_template = DROPS_OTHER_ROLES
    model = save_tiny_llama(tmp_path / "model", tokenizer)
    make_task(tmp_path / "tasks" / "t0", instance_id="toy__0")
    config = GRPORunConfig(policy=str(model), tasks=str(tmp_path / "tasks"), out=tmp_path / "run", group=2, steps=1,
                           store=tmp_path / "store", device="cpu")
    with pytest.raises(PdbgymError, match="cannot render pdbgym's tool turns"):
        build(config)
    assert not (tmp_path / "run" / "steps.jsonl").exists()
