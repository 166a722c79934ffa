"""The weights GRPO's rollouts decode from: a plain copy of the policy with its delta merged in.

The trainer's policy is a PEFT model: every adapted linear layer runs its base matmul plus the LoRA
branch, and a DoRA layer also rebuilds ``W + s B A`` and its row norms on every forward. In a decode
step of one token per row that is several times the base layer's own work and kernel launches, and a
captured CUDA graph of the step replays all of it. So the rollouts (and the val gate) decode from
``MergedPolicy.model``: a plain model of the same architecture whose adapted weights are
``W' = W + s B A`` (LoRA) or ``m (W + s B A) / ||W + s B A||`` (DoRA), computed in float32 by
``pdbgym.adapters.merge_math`` and cast once to the policy's own dtype (``dtype="policy"``, the default)
or kept in float32 (``dtype="float32"``). A bf16 ``W'`` rounds a change smaller than half of W's
rounding step away, but the live bf16 policy, what the trainer scores with, is as far from float32
arithmetic: on the embedded model both are about 0.0014 nats a position from it and both miss one RL
step's change of the log-probs by about 59 times the change (``bench/rollout_precision.py``). A float32
copy samples what float32 arithmetic gives (0.8% off), at twice the weights' and KV caches' memory and
float32 matmuls. ``refresh`` rewrites them in place before each batch of
episodes, so the live weights are what is sampled and the copy's tensors never move (a captured graph
stays valid). The trainer's own weights are only read: merging in place and unmerging would leave
rounding drift in the frozen base every step.

``MergedPolicy.of`` refuses, with the reason, a policy it cannot copy exactly (an adapter on a layer
other than ``nn.Linear``, several adapters, an adapter bias, an adapted weight tied to another, a copy
that cannot be made) and GRPO then decodes from the live PEFT model, as ``--rollout-weights live``
does; the trainer also compares the copy's logits with the live policy's after every refresh
(``mismatch``: a fresh delta is zero, so the first check alone would not see a wrong merge). Where both
compute in float32 the largest logit difference must be within ``CHECK_TOLERANCE``; where either is a
half type the live logits are themselves rounded (their largest difference from float32 is 1.1 to
1.4 on the embedded model), so the check bounds the mean KL per position between the two next-token
distributions instead (``CHECK_KL``): rounding gives thousandths of a nat, a weight not written gives
nats; an error the size of a small delta is below what bf16 logits show (the merge math is pinned in
float32, to 1e-4, by the tests).
"""

from __future__ import annotations

from copy import deepcopy
from typing import TYPE_CHECKING, cast

from pdbgym.adapters.merge_math import merge_module

if TYPE_CHECKING:  # annotations only: torch, transformers and PEFT load with the trainer
    import torch
    from peft import PeftModel
    from transformers import PreTrainedModel

CHECK_IDS = 16  # tokens of the one forward that compares the copy with the live policy
CHECK_TOLERANCE = 1e-3  # largest logit difference accepted where the copy and the live policy are float32
CHECK_KL = 0.05  # mean KL per position accepted where either is a half type (nats; see the module doc)
COPY_DTYPES = ("policy", "float32")


class MergedPolicy:
    """A plain copy of a PEFT policy with its active adapter merged into the weights (see module doc)."""

    def __init__(self, model: PreTrainedModel, adapter: str):
        self.model = model
        self.adapter = adapter
        self.refreshes = 0

    @classmethod
    def of(cls, live: torch.nn.Module, dtype: str = "policy") -> tuple[MergedPolicy | None, str]:
        """The merged copy of ``live`` (a PEFT model, unwrapped) in ``dtype`` (``policy``: the live weights'
        own, or ``float32``), or None and why it cannot be made."""
        if dtype not in COPY_DTYPES:
            raise ValueError(f"a merged copy's dtype is one of {COPY_DTYPES}, not {dtype!r}")
        problem = _unsupported(live)
        if problem:
            return None, problem
        import torch  # optional: torch (pdbgym[hf])
        from transformers import AutoModelForCausalLM  # optional: transformers (pdbgym[hf])

        peft = cast("PeftModel", live)  # _unsupported found it a PEFT model with one adapter
        base = peft.get_base_model()
        parameter = next(base.parameters())
        try:
            with torch.device(parameter.device):
                copy = AutoModelForCausalLM.from_config(base.config, dtype=torch.float32 if dtype == "float32"
                                                        else parameter.dtype,
                                                        attn_implementation=base.config._attn_implementation)
            copy.tie_weights()
            copy.generation_config = deepcopy(base.generation_config)  # its stop ids (eos lists), not the config's
            copy.eval().requires_grad_(False)
            merged = cls(copy, _active(peft))
            merged.refresh(peft)
            problem = merged.mismatch(peft)
        except (RuntimeError, ValueError, KeyError, TypeError, OSError) as exc:  # out of memory is a RuntimeError
            return None, f"could not be made ({type(exc).__name__}: {exc})"
        if problem:
            return None, problem
        return merged, ""

    def mismatch(self, live: PeftModel) -> str:
        """Why the copy's logits are not the live policy's on one short input ('' when they are)."""
        import torch  # optional: torch (pdbgym[hf])

        difference, divergence = self.check(live)
        exact = all(next(model.parameters()).dtype == torch.float32 for model in (self.model, live))
        if exact and difference > CHECK_TOLERANCE:
            return f"gives logits {difference:.3g} away from the live policy's (more than {CHECK_TOLERANCE})"
        if not exact and divergence > CHECK_KL:
            return (f"gives next-token distributions {divergence:.3g} nats a position away from the live "
                    f"policy's (more than {CHECK_KL}; largest logit difference {difference:.3g})")
        return ""

    def distance(self, live: PeftModel) -> str:
        """The check's two figures, in words."""
        difference, divergence = self.check(live)
        return f"largest logit difference {difference:.3g}, mean KL {divergence:.3g} nats a position"

    def refresh(self, live: PeftModel) -> None:
        """Write the live policy's current weights, merged, into the copy (in place)."""
        import torch  # optional: torch (pdbgym[hf])

        base = live.get_base_model()
        target = dict(self.model.named_parameters(remove_duplicate=False))
        adapted = {name: module for name, module in base.named_modules() if _is_lora(module)}
        done: set[str] = set()
        with torch.no_grad():
            for name, module in adapted.items():
                layer = module.base_layer
                magnitude = (module.lora_magnitude_vector[self.adapter].weight
                             if module.use_dora.get(self.adapter) else None)
                into = target[f"{name}.weight"]
                into.copy_(merge_module(layer.weight, module.lora_A[self.adapter].weight,
                                        module.lora_B[self.adapter].weight, magnitude,
                                        float(module.scaling[self.adapter]), bool(module.fan_in_fan_out), into.dtype))
                done.add(f"{name}.weight")
                if layer.bias is not None:
                    target[f"{name}.bias"].copy_(layer.bias)
                    done.add(f"{name}.bias")
            for name, parameter in base.named_parameters(remove_duplicate=False):
                if ".lora_" in name or ".base_layer." in name:
                    continue
                if name not in target:
                    raise KeyError(f"{name} has no place in the copy")
                if name not in done:
                    target[name].copy_(parameter)
                    done.add(name)
        missing = sorted(set(target) - done)
        if missing:
            raise KeyError(f"the copy's {missing[:3]} have no source in the live policy")
        self.refreshes += 1

    def check(self, live: PeftModel) -> tuple[float, float]:
        """The largest absolute logit difference between the copy and ``live`` on one short input, and the
        mean KL (live || copy) of their next-token distributions per position."""
        import torch  # optional: torch (pdbgym[hf])

        device = next(self.model.parameters()).device
        vocab = int(self.model.config.vocab_size)
        ids = (torch.arange(CHECK_IDS, device=device) * 7919 % vocab)[None, :]
        training = live.training
        live.eval()
        try:
            with torch.no_grad():
                ours = self.model(input_ids=ids).logits.float()
                theirs = live(input_ids=ids).logits.float()
        finally:
            live.train(training)
        divergence = torch.nn.functional.kl_div(torch.log_softmax(ours, -1), torch.log_softmax(theirs, -1),
                                                log_target=True, reduction="none").sum(-1).mean()
        return float((ours - theirs).abs().max()), float(divergence)

    def megabytes(self) -> float:
        return sum(p.numel() * p.element_size() for p in self.model.parameters()) / 2**20


def _is_lora(module: torch.nn.Module) -> bool:
    return hasattr(module, "lora_A") and hasattr(module, "base_layer")


def _active(live: PeftModel) -> str:
    active = getattr(live, "active_adapters", None) or [getattr(live, "active_adapter", "default")]
    return str(active[0])


def _unsupported(live: torch.nn.Module) -> str:
    """Why ``live`` cannot be copied with its delta merged ('' when it can)."""
    import torch  # optional: torch (pdbgym[hf])

    if not hasattr(live, "get_base_model"):
        return "the policy is not a PEFT model"
    active = getattr(live, "active_adapters", None) or []
    if len(active) != 1:
        return f"{len(active)} active adapters (one is merged)"
    base = live.get_base_model()
    owners: dict[int, list[str]] = {}
    for name, parameter in base.named_parameters(remove_duplicate=False):
        owners.setdefault(parameter.data_ptr(), []).append(name)
    for name, module in base.named_modules():
        if _is_lora(module):
            if not isinstance(module.base_layer, torch.nn.Linear):
                return f"{name} adapts a {type(module.base_layer).__name__}, not an nn.Linear"
            if len(module.lora_A) != 1:
                return f"{name} holds {len(module.lora_A)} adapters"
            if any(getattr(b, "bias", None) is not None for b in module.lora_B.values()):
                return f"{name}'s adapter has a bias (lora_bias)"
            shared = owners.get(module.base_layer.weight.data_ptr(), [])
            if len(shared) > 1:
                return f"{name} adapts a weight tied to {[n for n in shared if not n.startswith(name)][:2]}"
    return ""
