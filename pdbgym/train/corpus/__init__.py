"""Token-exact SFT corpora: examples from rollout records (``build``) and chat JSONL trajectories (``chat_jsonl``)."""
