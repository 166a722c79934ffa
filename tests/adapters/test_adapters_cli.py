"""`pdbgym adapters` end to end through the real typer app: register, lineage, list, merge, verify, accept."""

from __future__ import annotations

import json

import pytest
from adapters_testkit import shared_world
from typer.testing import CliRunner

from pdbgym.adapters.peft_format import adapter_content_hash, load_adapter
from pdbgym.cli import app


@pytest.fixture
def world(tmp_path_factory):
    return shared_world(tmp_path_factory)


def _run(*args: str):
    result = CliRunner().invoke(app, ["adapters", *map(str, args)])
    return result


def test_register_lineage_merge_verify_via_cli(world, tmp_path):
    store = tmp_path / "store"
    assert _run("register", world.base, "--name", "base", "--store", store).exit_code == 0
    sft_hash = adapter_content_hash(load_adapter(world.sft))
    registered = _run("register", world.rl, "--parent", sft_hash, "--name", "rl", "--store", store)
    assert registered.exit_code == 0 and "UNSERVABLE" in registered.output
    unservable = _run("lineage", "rl", "--store", store, "--json")
    lineage = json.loads(unservable.stdout)
    assert lineage["servable"] is False and lineage["layers"][0]["present"] is False
    assert unservable.exit_code == 1  # scripts can gate a deployment on it
    human = _run("lineage", "rl", "--store", store)
    assert "MISSING" in human.output and "unservable" in human.output and human.exit_code == 1
    recipe = tmp_path / "recipe.json"
    recipe.write_text(json.dumps({"corpus_hash": "abc", "epochs": 4}))
    sft = _run("register", world.sft, "--parent", "base", "--name", "sft", "--recipe", recipe, "--seed", "42",
               "--lr", "1e-4", "--store", store, "--json")
    assert json.loads(sft.stdout)["record"]["recipe"] == {"corpus_hash": "abc", "epochs": 4, "seed": 42, "lr": 1e-4}
    servable = _run("lineage", "rl", "--store", store, "--json")
    lineage = json.loads(servable.stdout)
    assert lineage["servable"] is True and len(lineage["layers"]) == 3 and servable.exit_code == 0
    listing = json.loads(_run("list", "--store", store, "--json").stdout)
    assert {node["kind"] for node in listing} == {"model", "adapter"} and all(n["servable"] for n in listing)
    merged = _run("merge", "rl", "--out", tmp_path / "merged", "--store", store, "--json")
    assert merged.exit_code == 0, merged.output
    payload = json.loads(merged.stdout)
    assert payload["verification"]["passed"] is True and payload["manifest"]["mode"] == "chain"
    verify = _run("verify", tmp_path / "merged")
    assert verify.exit_code == 0 and "PASS" in verify.output


def test_cli_refusals_exit_non_zero(world, tmp_path):
    store = tmp_path / "store"
    for args in ((world.base, "--name", "base"), (world.sft, "--parent", "base", "--name", "sft"),
                 (world.rl, "--parent", "sft", "--name", "rl")):
        registered = _run("register", *args, "--store", store)
        assert registered.exit_code == 0, registered.output
    sft = _run("register", world.sft, "--parent", "base", "--store", store)
    assert "parent evidence inconclusive" in sft.output  # the SFT's magnitudes were trained far from the base
    assert "(adapter)" in _run("register", world.rl, "--parent", "sft", "--store", store).output
    refused = _run("merge", "rl", "--onto", world.base, "--out", tmp_path / "out", "--store", store)
    assert refused.exit_code != 0 and "never existed" in str(refused.exception)
    warned = _run("register", world.rl_on_raw_base, "--parent", "sft", "--store", store)
    assert warned.exit_code == 0 and "WARNING" in warned.output and "contradicted" in warned.output


def test_accept_via_cli(world, tmp_path):
    candidate = tmp_path / "candidate"
    import shutil

    shutil.copytree(world.sft, candidate)
    (candidate / "trainer_state.json").write_text(json.dumps({"log_history": [{"step": 156, "eval_loss": 0.1165}]}))
    targets = tmp_path / "targets.json"
    targets.write_text(json.dumps({"lora_tensor_count": 24, "best_val_loss": 0.11644, "best_step": 156}))
    accepted = _run("accept", candidate, "--targets", targets)
    assert accepted.exit_code == 0 and "ACCEPTED" in accepted.output
    targets.write_text(json.dumps({"lora_tensor_count": 432, "best_val_loss": 0.11644, "best_step": 156}))
    rejected = _run("accept", candidate, "--targets", targets, "--json")
    assert rejected.exit_code == 1 and json.loads(rejected.stdout)["accepted"] is False


def test_a_training_run_folder_stands_for_the_adapter_it_wrote(world, tmp_path):
    import shutil

    store = tmp_path / "store"
    assert _run("register", world.base, "--name", "base", "--store", store).exit_code == 0
    assert _run("register", world.sft, "--parent", "base", "--name", "sft", "--store", store).exit_code == 0
    run_dir = tmp_path / "runs" / "sft"  # what `train sft --out runs/sft` leaves: the adapter under adapter/
    shutil.copytree(world.sft, run_dir / "adapter")
    (run_dir / "metrics.jsonl").write_text("")
    merged = _run("merge", run_dir, "--out", tmp_path / "merged", "--store", store, "--json", "--no-verify")
    assert merged.exit_code == 0, merged.output
    assert json.loads(merged.stdout)["manifest"]["target_label"].startswith("sft")
