"""Online DAgger: its config (``config``) and the rollout, label, aggregate, train loop (``loop``)."""
