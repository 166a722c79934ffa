"""One experiment, one command: split -> oracle cache -> SFT -> GRPO -> val-gated choice -> held-out
evaluation -> one report (``run.py``), from a versioned TOML file (``config.py``)."""
