"""GRPO on TRL's ``GRPOTrainer`` with the seed recipe.

``config`` (``GRPORunConfig``), ``trainer`` (the TRL subclass, rollout function and callbacks), ``run``
(``train_grpo``: build, resume, train, select, register), ``rollout`` (episodes through the agent loop),
``rewards``, ``schedules`` (adaptive KL, turn-budget curriculum, anchor and replay decay), ``data`` (BC
anchor batches and replay from the SFT corpus), ``valgate`` (each checkpoint scored on the val split),
``progress`` (progress bars and kept transcripts), ``report`` (the training report from a run folder),
``commands`` (``pdbgym train grpo`` and ``pdbgym train report``).
"""
