"""The demo's data phases: ``split`` (the tasks split into train and a held-out ``test`` split, copied
into ``OUT/tasks/{train,test}``), ``teacher`` (a teacher cache on each) and ``corpus`` (token-exact SFT
examples from the train cache). Each reuses what an earlier run of the same settings finished."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from pdbgym.agent.build import CacheBuildConfig, build_cache
from pdbgym.episode_defaults import episode_defaults_for
from pdbgym.errors import PdbgymError
from pdbgym.tasks.splits import load_splits, make_splits, write_splits
from pdbgym.tasks.suites import resolve_tasks
from pdbgym.train.corpus.build import MANIFEST_FILE, CorpusConfig, build_corpus
from pdbgym.train.demo.config import DemoConfig


def split_tasks(config: DemoConfig) -> dict[str, list[str]]:
    """``OUT/splits.json`` (train / test) and the two task folders; returns split -> instance ids."""
    out = Path(config.out)
    splits_file = out / "splits.json"
    if not splits_file.is_file():
        data = make_splits(config.tasks, val_fraction=0.0, test_fraction=config.held_out, seed=config.seed)
        write_splits(data, splits_file)
    splits = load_splits(splits_file)
    ids = {name: [item["instance_id"] for item in splits.get(name, [])] for name in ("train", "test")}
    if not ids["train"] or not ids["test"]:
        raise PdbgymError(f"{splits_file}: the demo needs tasks in both train and test ({len(ids['train'])} and "
                          f"{len(ids['test'])}); give more tasks or another --held-out share")
    by_id = {task.instance_id: task for task in resolve_tasks(config.tasks)}
    for name, wanted in ids.items():
        folder = out / "tasks" / name
        if folder.is_dir() and sorted(p.name for p in folder.iterdir()) == sorted(wanted):
            continue
        shutil.rmtree(folder, ignore_errors=True)
        for instance_id in wanted:
            shutil.copytree(by_id[instance_id].path, folder / instance_id, symlinks=True)
    return ids


def build_caches(config: DemoConfig, tick: Callable[[], None]) -> dict[str, dict[str, Any]]:
    """Teacher caches on the train and held-out tasks (a rerun plays only missing episodes)."""
    summaries = {}
    for name in ("train", "test"):
        cache = CacheBuildConfig(policy=config.teacher, out=Path(config.out) / f"cache-{name}",
                                 tasks=str(Path(config.out) / "tasks" / name), runs=1, workers=config.workers, seed=config.seed,
                                 tokenizer=config.base,
                                 episode=replace(episode_defaults_for("cache build"),
                                                 temperature=0.0 if config.teacher == "scripted" else 0.7))
        summaries[name] = build_cache(cache, on_result=lambda result, total: tick())
    return summaries


def build_demo_corpus(config: DemoConfig) -> dict[str, Any]:
    """The SFT corpus of the train cache: solved episodes, cut to ``sft_tokens`` ids (held-out refused)."""
    out = Path(config.out)
    manifest = out / "corpus" / MANIFEST_FILE
    if not manifest.is_file():
        build_corpus(CorpusConfig(caches=[out / "cache-train"], out=out / "corpus", solved_only=True,
                                  max_length=config.sft_tokens, overlength="truncate", splits=out / "splits.json"))
    built = json.loads(manifest.read_text())
    if not built["examples_kept"]:
        raise PdbgymError(f"the teacher {config.teacher!r} solved no train task ({built['dropped']}): there is "
                          "nothing to imitate; try another --teacher")
    return built
