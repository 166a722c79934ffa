"""Task synthesis: mutate real Python projects with AST operators and keep validated bugs as tasks.

Pipeline (see docs/synthesis.md): ``project`` prepares a minimal copy of a source, ``baseline`` runs
its clean suite (flaky tests out, per-test function coverage in), ``operators``/``splice`` render
mutants, ``candidate`` tests each mutant on the tests that reach it and writes and validates tasks,
``engine`` drives it all in a process pool, resumably and deterministically.
"""

from pdbgym.tasks.synth.engine import SourceReport, SynthConfig, synthesize_source
from pdbgym.tasks.synth.operators import OPERATORS, MutationSite, enumerate_sites
from pdbgym.tasks.synth.splice import render_mutation

__all__ = ["OPERATORS", "MutationSite", "SourceReport", "SynthConfig", "enumerate_sites", "render_mutation",
           "synthesize_source"]
