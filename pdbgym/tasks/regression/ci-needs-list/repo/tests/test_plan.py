import pytest

from ciplan.graph import DependencyCycle, UnknownJob, find_cycle
from ciplan.pipeline_file import PipelineSyntaxError, parse_pipeline
from ciplan.stages import plan_file, plan_stages

PIPELINE = """
[lint]
run = ruff check
[build]
run = make wheel
[test]
run = pytest
needs = build, lint
[publish]
run = twine upload dist/*
needs = test
"""


def test_parse_jobs():
    jobs = parse_pipeline(PIPELINE)
    assert [job.name for job in jobs] == ["lint", "build", "test", "publish"]
    assert jobs[2].needs == ("build", "lint")


def test_job_without_run_is_rejected():
    with pytest.raises(PipelineSyntaxError, match="docs"):
        parse_pipeline("[docs]\nneeds = build")


def test_stages():
    assert plan_file(PIPELINE) == [["build", "lint"], ["test"], ["publish"]]


def test_unknown_needed_job():
    with pytest.raises(UnknownJob, match="'deploy' needs 'staging'"):
        plan_file("[deploy]\nrun = ./deploy.sh\nneeds = staging")


def test_cycle_is_reported():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    with pytest.raises(DependencyCycle, match="a -> b -> c -> a"):
        plan_stages(graph)


def test_independent_jobs_share_a_stage():
    assert plan_stages({"x": set(), "y": set(), "z": {"x"}}) == [["x", "y"], ["z"]]


def test_needs_without_spaces():
    text = "[a]\nrun = true\n[b]\nrun = true\n[c]\nrun = true\nneeds = a,b"
    assert plan_file(text) == [["a", "b"], ["c"]]


def test_needs_with_aligned_commas():
    text = PIPELINE + "[report]\nrun = coverage html\nneeds = test ,  lint\n"
    assert plan_file(text) == [["build", "lint"], ["test"], ["publish", "report"]]


def test_parse_needs_list_variants():
    jobs = parse_pipeline("[a]\nrun = x\n[b]\nrun = y\nneeds = a\n[c]\nrun = z\nneeds = a,b ,\n")
    assert [job.needs for job in jobs] == [(), ("a",), ("a", "b")]
