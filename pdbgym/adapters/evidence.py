"""Parent evidence carried by DoRA adapters.

PEFT initialises a DoRA magnitude vector to the per-output-row L2 norms of the weight it is attached to,
m0 = ||W_parent + s * B0 @ A0||_row (B0 = 0 with default init, so m0 = ||W_parent||_row). Training moves m
only slowly, so the stored magnitudes still point at the weights the adapter was trained against. We
compare them with the row norms of every layer of the claimed chain (raw base, base+SFT, ...): if an
earlier layer explains them much better than the claimed parent, the claim is contradicted.

Distances are relative: sqrt(sum over modules ||m - n||^2) / sqrt(sum ||m||^2), dimensionless, >= 0.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass

from pdbgym.adapters.fingerprint import open_model_folder
from pdbgym.adapters.merge import StackLayer
from pdbgym.adapters.merge_math import lora_delta, merge_module, output_row_norms
from pdbgym.adapters.peft_format import AdapterFolder
from pdbgym.adapters.safetensors_io import read_tensor

# A claimed parent is contradicted when an earlier layer's norms are at least this many times closer.
CONTRADICTION_RATIO = 4.0
# Above this relative distance even the best candidate does not explain the magnitudes.
INCONCLUSIVE_DISTANCE = 0.2


@dataclass(frozen=True)
class ParentEvidence:
    """Relative distances of the DoRA magnitudes to each candidate's row norms, base first."""

    candidates: list[str]  # labels: the chain's layers, base first; the last is the claimed parent
    distances: list[float]
    verdict: str  # "consistent", "contradicted" or "inconclusive"
    message: str

    def as_dict(self) -> dict[str, object]:
        return {"candidates": self.candidates, "distances": self.distances,
                "verdict": self.verdict, "message": self.message}


def relative_distance(squared_error: float, squared_norm: float) -> float:
    """sqrt(sum ||m - n||^2 / sum ||m||^2); 0 means identical."""
    return (squared_error / squared_norm) ** 0.5 if squared_norm > 0 else float("inf")


def judge(candidates: list[str], distances: list[float]) -> tuple[str, str]:
    """Turn per-candidate distances into a verdict and an explanation (pure)."""
    claimed, claimed_distance = candidates[-1], distances[-1]
    best = min(range(len(distances)), key=distances.__getitem__)
    if best != len(distances) - 1 and distances[best] * CONTRADICTION_RATIO <= claimed_distance:
        return "contradicted", (
            f"DoRA magnitudes match the row norms of {candidates[best]} (relative distance "
            f"{distances[best]:.2e}), not those of the claimed parent {claimed} ({claimed_distance:.2e}): "
            "it was most likely trained against the earlier weights. Check --parent before merging."
        )
    if distances[best] > INCONCLUSIVE_DISTANCE:
        return "inconclusive", (
            f"DoRA magnitudes are far from every candidate's row norms (best {distances[best]:.2e}); "
            "training moved them too far to confirm the parent."
        )
    return "consistent", f"DoRA magnitudes match the claimed parent {claimed} (relative distance {claimed_distance:.2e})."


def dora_parent_evidence(
    base_dir: str, chain: list[StackLayer], candidate: AdapterFolder, base_label: str,
    on_module: Callable[[], None] | None = None,
) -> ParentEvidence:
    """Compare ``candidate``'s magnitudes with the row norms after each layer of ``chain`` (base first).

    For each stage both ||W|| and ||W + s B A|| (with the candidate's trained B, A) are tried and the
    closer one counts, since the magnitude started at one of them depending on the init.
    """
    folder = open_model_folder(base_dir)
    locate = {name: (shard, entry) for shard in folder.shards for name, entry in shard.tensors.items()}
    labels = [base_label] + [layer.label for layer in chain]
    squared_error = [0.0] * len(labels)
    squared_norm = 0.0
    with ExitStack() as stack:
        handles = {shard.path: stack.enter_context(open(shard.path, "rb")) for shard in folder.shards}
        chain_handles = [stack.enter_context(open(layer.adapter.header.path, "rb")) for layer in chain]
        own = stack.enter_context(open(candidate.header.path, "rb"))
        for name, delta in candidate.modules.items():
            shard, entry = locate[name]
            weight = read_tensor(handles[shard.path], entry)
            magnitude = read_tensor(own, delta.magnitude).float()
            trained = lora_delta(read_tensor(own, delta.lora_a), read_tensor(own, delta.lora_b),
                                 delta.scaling, candidate.fan_in_fan_out)
            squared_norm += float(magnitude.square().sum())
            for stage in range(len(labels)):
                if stage > 0:
                    layer, handle = chain[stage - 1], chain_handles[stage - 1]
                    step = layer.adapter.modules.get(name)
                    if step is not None:
                        weight = merge_module(
                            weight, read_tensor(handle, step.lora_a), read_tensor(handle, step.lora_b),
                            read_tensor(handle, step.magnitude) if step.magnitude else None,
                            step.scaling, layer.adapter.fan_in_fan_out,
                        )
                errors = [
                    float((magnitude - output_row_norms(w, candidate.fan_in_fan_out)).square().sum())
                    for w in (weight.float(), weight.float() + trained)
                ]
                squared_error[stage] += min(errors)
            if on_module is not None:
                on_module()
    distances = [relative_distance(err, squared_norm) for err in squared_error]
    verdict, message = judge(labels, distances)
    return ParentEvidence(labels, distances, verdict, message)
