"""``pdbgym envs``: the cache of task environments (``pdbgym.sandbox.pyenv``) seen and managed."""
