"""Adapter stacks with lineage: a content-addressed store, shard-wise LoRA/DoRA merging, verification.

An RL adapter is a delta over a frozen SFT adapter over a base model; its adapter_config.json names only
the raw base. The store records what each adapter was really trained against, so a merge can only ever
produce a model that the training actually saw (see docs/adapters.md).
"""
