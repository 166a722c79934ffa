"""Supervised fine-tuning of a LoRA/DoRA adapter: its config (``config``), the trainer (``trainer``) and resume of a killed run (``resume``)."""
