"""Grading, the trust boundary: the one place that decides whether a test passed.

- ``tree``: the agent's change read once from its workspace as source text, applied to a fresh copy of
  the task's repo (``read_agent_change``, ``build_tree``);
- ``screen``: what the change adds of interpreter machinery, read from its source;
- ``protect``: which files grading never takes (tests, configuration, start-up files, shadows);
- ``testrun``: the hardened run in the sandbox and the host's reading of its result channel;
- ``launch``, ``plugin``, ``guard``, ``seccomp``: what runs inside the graded process before any project
  code (the isolated start, the report plugin and its self-check, the audit hook over the agent's lines,
  the filter that keeps the channel the host's pipe);
- ``server``: the pytest fork server inside an episode's sandbox (the agent's own runs and pdb session);
- ``verdict``: the judgement of a run's records and its ending;
- ``grader``: ``grade``, which puts them together (docs/sandbox.md, "Grading as a security boundary").

It imports only ``pdbgym.sandbox`` and the base modules; a task is anything shaped like
``subject.GradedTask``. Nothing is imported here: the modules that run inside the sandbox are copied there
alone (``pdbgym.sandbox.runtime``) and must not pull in the host's side.
"""
