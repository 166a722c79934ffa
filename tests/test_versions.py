"""Dependency floors: pdbgym/versions.py's table is pyproject.toml's floors, a too-old version is refused
with a message that says how to fix it, and what is installed here passes."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from pdbgym import versions

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def pyproject_floors() -> dict[str, set[str]]:
    """Every ``>=`` floor in pyproject.toml (dependencies and extras), by canonical package name."""
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    lines = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        lines += extra
    floors: dict[str, set[str]] = {}
    for line in lines:
        req = Requirement(line)
        for spec in req.specifier:
            if spec.operator == ">=":
                floors.setdefault(canonicalize_name(req.name), set()).add(spec.version)
    return floors


def test_table_is_pyprojects_floors():
    table = {canonicalize_name(name): {floor} for name, floor in versions.MINIMUM.items()}
    assert pyproject_floors() == table


def test_extras_named_in_messages_hold_their_package():
    extras = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]
    for package, extra in versions.EXTRA.items():
        assert package in versions.MINIMUM
        assert package in {canonicalize_name(Requirement(r).name) for r in extras[extra]}, (package, extra)


@pytest.mark.parametrize("package", ["trl", "transformers", "peft", "pytest"])
def test_too_old_is_refused_with_the_fix(package):
    minimum = versions.MINIMUM[package]
    with pytest.raises(versions.DependencyVersionError) as caught:
        versions.require(package, installed="0.0.1")
    message = str(caught.value)
    assert f"{package}>={minimum}" in message
    assert f"{package} 0.0.1 is installed" in message
    assert f"pip install -U '{package}>={minimum}'" in message
    assert caught.value.name == package
    assert isinstance(caught.value, ImportError)


def test_too_old_names_the_extra():
    message = versions.check("trl", "0.12.0")
    assert message is not None and "pdbgym[train]" in message


def test_floor_itself_and_newer_pass():
    for package, minimum in versions.MINIMUM.items():
        versions.require(package, installed=minimum)
        assert versions.check(package, minimum + ".post1") is None
    assert versions.check("torch", "2.13.0+cpu") is None  # local version labels of wheels


def test_missing_package_is_left_to_the_import():
    assert versions.check("xgrammar", None) is None


@pytest.mark.parametrize("package", sorted(versions.MINIMUM))
def test_installed_versions_pass(package):
    if versions.installed_version(package) is None:
        pytest.skip(f"{package} is not installed here")
    versions.require(package)


def test_training_stack_passes():
    versions.require_training()
