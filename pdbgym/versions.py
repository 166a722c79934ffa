"""The lowest version of each dependency pdbgym works with, and the check that says so at import.

``MINIMUM`` is the one table: ``pyproject.toml``'s floors must equal it (``tests/test_versions.py``).
Each optional heavy dependency is checked with :func:`require` where pdbgym first imports it, so an
installed version that is too old fails with a message naming the package, both versions and the
``pip`` command that fixes it, instead of an ``AttributeError`` deep inside a run. The training
package calls :func:`require_training` (or :func:`require` per package) before importing TRL, PEFT or
accelerate.

Base layer: imports nothing of pdbgym.
"""

from __future__ import annotations

import functools
import importlib
from importlib import metadata
from types import ModuleType

from packaging.version import Version

# Distribution name -> lowest version, with the reason. A floor is the lowest release that has what
# pdbgym uses where that was checked; otherwise the lowest version pdbgym is known to run on.
MINIMUM: dict[str, str] = {
    # core
    "typer": "0.12",
    "rich": "13",
    "numpy": "1.26",
    "scipy": "1.11",
    "pytest": "9",  # grading reads pytest 9's built-in subtest reports (_pytest.subtests); tested on 9.2
    "pytest-timeout": "2.3",
    "packaging": "20",  # Version comparison, used by this module
    # hf
    "torch": "2.11",  # the oldest pdbgym has run on (docs/benchmarks.md, docs/training.md); make installs 2.13
    "transformers": "5.24",  # transformers 5 (``dtype=``, GGUF loading, ``transformers serve``); SFT/GRPO ran on 5.24
    "accelerate": "1.16",  # the tested version (FSDP2 configs, gather_object under DDP); no older one checked
    "safetensors": "0.8",  # what transformers 5.24+ itself requires
    "gguf": "0.10",  # transformers' GGUF loader refuses older (GGUF_MIN_VERSION)
    # train
    "peft": "0.21.2",  # the tested version: pdbgym's DoRA merge math is checked against PEFT's own
    "trl": "1.15",  # trl.models.enable_selective_activation_checkpointing is new in 1.15; rollout_func,
    # env_mask and trl.distributed.DistributedBackend (is_fsdp, is_zero3) are there already
    "tensorboard": "2.14",
    # serve
    "openai": "1.98",  # what transformers[serving] requires
    # parquet, report, ray, test, constrained
    "pyarrow": "15",
    "matplotlib": "3.8",
    "ray": "2.9",
    "pytest-xdist": "3.8",  # `make test` runs the suite on every core (-n auto --dist loadfile); the tested version
    "ruff": "0.5",
    "xgrammar": "0.2.9",
}

# What ``pip install`` names to pull each package in with pdbgym's own floors.
EXTRA: dict[str, str] = {
    "torch": "hf", "transformers": "hf", "accelerate": "hf", "safetensors": "hf", "gguf": "hf",
    "peft": "train", "trl": "train", "tensorboard": "train", "openai": "serve", "pyarrow": "parquet",
    "matplotlib": "report", "ray": "ray", "pytest-xdist": "test", "ruff": "test", "xgrammar": "constrained",
}

TRAINING = ("torch", "transformers", "accelerate", "peft", "trl")


class DependencyVersionError(ImportError):
    """An installed dependency is older than pdbgym's floor for it."""


def installed_version(package: str) -> str | None:
    """The installed distribution's version, or None when it is not installed."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def check(package: str, installed: str | None) -> str | None:
    """The message for ``installed`` (a version string, or None for not installed) against the floor of
    ``package``; None when it is new enough or absent (a missing package is left to the import)."""
    minimum = MINIMUM[package]
    if installed is None or Version(installed) >= Version(minimum):
        return None
    fix = f"pip install -U '{package}>={minimum}'"
    if package in EXTRA:
        fix += f" (or: pip install -U 'pdbgym[{EXTRA[package]}]')"
    return f"pdbgym needs {package}>={minimum}, but {package} {installed} is installed. Fix: {fix}"


def require(*packages: str, installed: str | None = None) -> None:
    """Raise :class:`DependencyVersionError` when an installed one of ``packages`` is older than its floor.

    ``installed`` stands in for the installed version (tests: a fake distribution version); by default
    each version is read from the distribution's metadata, once per package."""
    for package in packages:
        message = check(package, installed) if installed is not None else _installed_check(package)
        if message is not None:
            raise DependencyVersionError(message, name=package)


@functools.cache
def _installed_check(package: str) -> str | None:
    return check(package, installed_version(package))


def import_optional(module: str, extra: str, purpose: str, error: type[Exception]) -> ModuleType:
    """Import ``module``, a dependency of the optional ``extra``, checked against its floor; when it is
    missing raise ``error`` saying what needs it (``purpose``) and which extra to install."""
    try:
        imported = importlib.import_module(module)
    except ImportError as exc:
        raise error(f"{purpose} needs {module}: pip install 'pdbgym[{extra}]'") from exc
    package = module.partition(".")[0]
    if package in MINIMUM:
        require(package)
    return imported


def require_training() -> None:
    """The floors of the training stack (torch, transformers, accelerate, PEFT, TRL), for
    ``pdbgym.train`` to call before it imports any of them."""
    require(*TRAINING)


# Keyword arguments of every ``from_pretrained`` of a model in pdbgym. transformers (5.25) turns its Hub
# kernels on by default: a model put into training or inference mode on a GPU then resolves layer
# kernels on the Hub and runs their code. pdbgym runs offline and loads no code it did not ship, so they
# are off; the layers keep transformers' own torch code (the same arithmetic on CPU and GPU).
NO_HUB_CODE: dict[str, bool] = {"use_kernels": False}
