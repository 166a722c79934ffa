"""Task synthesis: mutate real Python projects with AST operators and keep validated bugs as tasks.

Pipeline (see docs/synthesis.md): ``project`` prepares a minimal copy of a source, ``baseline`` runs
its clean suite (flaky tests out, per-test function coverage in), ``operators``/``splice`` render
mutants, ``candidate`` tests each mutant on the tests that reach it and writes and validates tasks,
``engine`` drives it all in a process pool, resumably and deterministically. Entry point:
``pdbgym.tasks.synth.engine.synthesize_source``.

This package imports nothing at import time: ``probe`` and ``zygote`` are loaded into the projects'
own test processes, which should not pay for the rest of pdbgym.
"""
