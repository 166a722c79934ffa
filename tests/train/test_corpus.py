"""Corpus building: token-exact ids and masks, filters, split refusal, manifest, chat JSONL."""

from __future__ import annotations

import json

import pytest
from recordfixtures import episode_record, write_records

from pdbgym.errors import PdbgymError
from pdbgym.train.corpus.build import CorpusConfig, CorpusError, build_corpus, load_corpus
from pdbgym.train.corpus.chat_jsonl import ChatFormatError, tokenize_conversation

TURNS = [("b calc.py:3", "Breakpoint 1 at calc.py:3"), ("p a, b", "(2, 1)"), ("submit", "graded")]


def _corpus(tmp_path, records, **options):
    cache = write_records(tmp_path / "cache", records)
    manifest = build_corpus(CorpusConfig(caches=[cache], out=tmp_path / "corpus", **options))
    return manifest, load_corpus(tmp_path / "corpus")


def test_examples_are_the_record_ids_with_prompt_and_tool_output_masked(tmp_path, smol_tokenizer):
    record = episode_record(smol_tokenizer, "t1", TURNS)
    manifest, corpus = _corpus(tmp_path, [record])
    (example,) = corpus.examples
    assert example.input_ids == record.tokens  # never decoded and re-encoded
    assert example.assistant_masks == [0] * record.prompt_len + record.loss_mask
    masked = [t for t, m in zip(example.input_ids, example.assistant_masks, strict=True) if m]
    assert smol_tokenizer.decode(masked) == "b calc.py:3<|im_end|>p a, b<|im_end|>submit<|im_end|>"
    assert manifest["records_read"] == 1 and manifest["examples_kept"] == 1
    assert manifest["tokens"] == len(record.tokens) and manifest["loss_tokens"] == sum(record.loss_mask)
    assert manifest["tokenizer"]["fingerprint"] == record.metadata["tokenizer"]["fingerprint"]
    assert len(manifest["content_hash"]) == 64


def test_duplicates_unsolved_tampered_and_long_examples_are_dropped_by_reason(tmp_path, smol_tokenizer):
    records = [episode_record(smol_tokenizer, "t1", TURNS, sample_idx=0),
               episode_record(smol_tokenizer, "t1", TURNS, sample_idx=1),  # same ids: a duplicate
               episode_record(smol_tokenizer, "t2", TURNS[:1], solved=False),
               episode_record(smol_tokenizer, "t3", TURNS[:2], solved=False, reason="tampered"),
               episode_record(smol_tokenizer, "t4", TURNS * 20)]
    limit = len(records[0].tokens) + 5
    manifest, corpus = _corpus(tmp_path, records, solved_only=True, max_length=limit)
    assert manifest["dropped"] == {"duplicate": 1, "unsolved": 1, "tampered": 1, "over_max_length": 1}
    assert [e.instance_id for e in corpus.examples] == ["t1"]


def test_truncation_keeps_the_start_and_is_recorded(tmp_path, smol_tokenizer):
    record = episode_record(smol_tokenizer, "t1", TURNS * 5)
    limit = record.prompt_len + 12
    manifest, corpus = _corpus(tmp_path, [record], max_length=limit, overlength="truncate")
    (example,) = corpus.examples
    assert example.input_ids == record.tokens[:limit] and example.truncated
    assert manifest["truncated"] == 1
    with pytest.raises(CorpusError, match="no example survived"):
        build_corpus(CorpusConfig(caches=[tmp_path / "cache"], out=tmp_path / "c2", max_length=record.prompt_len,
                                  overlength="truncate"))


def test_dedupe_can_be_turned_off(tmp_path, smol_tokenizer):
    records = [episode_record(smol_tokenizer, "t1", TURNS, sample_idx=i) for i in range(3)]
    manifest, _ = _corpus(tmp_path, records, dedupe=False)
    assert manifest["examples_kept"] == 3 and manifest["dropped"] == {}


def test_held_out_tasks_are_refused_by_name_and_nothing_is_written(tmp_path, smol_tokenizer):
    splits = tmp_path / "splits.json"
    splits.write_text(json.dumps({"splits": {"train": [{"instance_id": "t1"}], "val": [{"instance_id": "t2"}],
                                             "test": [{"instance_id": "t3"}]}}))
    records = [episode_record(smol_tokenizer, name, TURNS) for name in ("t1", "t2", "t3")]
    with pytest.raises(CorpusError, match=r"2 held-out task\(s\).*t2 \(val\), t3 \(test\)"):
        _corpus(tmp_path, records, splits=splits)
    assert not (tmp_path / "corpus").exists()
    manifest, _ = _corpus(tmp_path, records[:1], splits=splits)
    assert manifest["task_ids"] == ["t1"]


def test_a_changed_corpus_file_is_refused(tmp_path, smol_tokenizer):
    _corpus(tmp_path, [episode_record(smol_tokenizer, "t1", TURNS)])
    path = tmp_path / "corpus" / "examples.jsonl"
    row = json.loads(path.read_text())
    row["assistant_masks"] = [1] * len(row["assistant_masks"])  # loss on tool output: must not pass
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(CorpusError, match="changed after it was built"):
        load_corpus(tmp_path / "corpus")


def test_records_of_two_tokenizers_are_refused(tmp_path, smol_tokenizer):
    other = episode_record(smol_tokenizer, "t2", TURNS)
    other.metadata["tokenizer"] = {"name": "words", "vocab_size": 49152, "fingerprint": "0123456789abcdef"}
    with pytest.raises(CorpusError, match="2 tokenizers"):
        _corpus(tmp_path, [episode_record(smol_tokenizer, "t1", TURNS), other])


def test_chat_jsonl_puts_loss_on_assistant_turns_only(tmp_path, smol_tokenizer):
    messages = [{"role": "system", "content": "fix it"}, {"role": "user", "content": "test fails"},
                {"role": "assistant", "content": "b calc.py:3"}, {"role": "user", "content": "Breakpoint 1"},
                {"role": "assistant", "content": "submit"}, {"role": "user", "content": "trailing, no loss"}]
    ids, mask = tokenize_conversation(messages, smol_tokenizer)
    rendered = smol_tokenizer.apply_chat_template(messages[:5], tokenize=False)
    assert smol_tokenizer.decode(ids) == rendered.rstrip("\n")
    learned = smol_tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if m])
    assert learned == "b calc.py:3<|im_end|>submit<|im_end|>"
    path = tmp_path / "traj.jsonl"
    path.write_text(json.dumps({"instance_id": "swe__1", "history": messages, "resolved": True}) + "\n"
                    + json.dumps({"messages": messages[:3]}) + "\n")
    manifest = build_corpus(CorpusConfig(caches=[], jsonl=[path], tokenizer="embedded", out=tmp_path / "c"))
    assert manifest["examples_kept"] == 2 and manifest["tokenizer"]["fingerprint"]
    corpus = load_corpus(tmp_path / "c")
    assert {e.instance_id: e.solved for e in corpus.examples} == {"swe__1": True, "traj:2": False}


def test_chat_jsonl_names_the_bad_line(tmp_path, smol_tokenizer):
    from pdbgym.train.corpus.chat_jsonl import read_chat_jsonl

    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n")
    with pytest.raises(ChatFormatError, match="bad.jsonl:1: holds no assistant turn"):
        read_chat_jsonl(path, smol_tokenizer)


# A corpus as pdbgym wrote it before examples were one typed record (commit 2834dec): lines and manifest hash verbatim.
WRITTEN_BEFORE = """\
{"instance_id": "acme__calc-1", "dataset": "builtin", "sample_idx": 0, "source": "runs/cache", "solved": true, "input_ids": [1, 17, 5, 9, 2], "assistant_masks": [0, 0, 1, 1, 1], "truncated": false, "termination_reason": "solved", "content_hash": "719170a891b7bd2709a1094481c7ec8d726b0a8b0329a2a82b67e6252507bf5b"}
{"instance_id": "acme__calc-2", "dataset": "dagger-iter0", "sample_idx": 3001, "source": "traj.jsonl", "solved": false, "input_ids": [1, 17, 8], "assistant_masks": [0, 1, 1], "truncated": true, "termination_reason": "budget", "content_hash": "19e856f65f3337c8698a38ad89c0e4cb5145bf035f418dcaed9ba15489d943c7"}
{"instance_id": "traj:7", "dataset": "chat", "sample_idx": 0, "source": "chat.jsonl", "solved": false, "input_ids": [4, 4, 6, 7], "assistant_masks": [0, 0, 0, 1], "truncated": false, "termination_reason": null, "content_hash": "b37cc85df588b849422f9fb10834a37e6740eb2000394ba80d4cea72f152efe7"}
"""
WRITTEN_BEFORE_HASH = "f9983b0db47c2590b5b2811b6f8945855b6ff02d8182d95fac3fbdd77f4c263f"


def test_a_corpus_written_in_the_earlier_format_loads_and_is_written_back_byte_for_byte(tmp_path):
    from pdbgym.train.corpus.build import write_corpus
    from pdbgym.train.corpus.example import Example

    old = tmp_path / "old"
    old.mkdir()
    (old / "examples.jsonl").write_text(WRITTEN_BEFORE)
    tokenizer = {"fingerprint": "sha256:0123abcd", "name": "toy"}
    (old / "corpus.json").write_text(json.dumps({"format": "pdbgym-sft-corpus/1", "examples_kept": 3,
                                                 "tokenizer": tokenizer, "content_hash": WRITTEN_BEFORE_HASH}))
    corpus = load_corpus(old)
    assert corpus.examples == [
        Example("acme__calc-1", "builtin", 0, "runs/cache", True, [1, 17, 5, 9, 2], [0, 0, 1, 1, 1],
                termination_reason="solved"),
        Example("acme__calc-2", "dagger-iter0", 3001, "traj.jsonl", False, [1, 17, 8], [0, 1, 1], truncated=True,
                termination_reason="budget"),
        Example("traj:7", "chat", 0, "chat.jsonl", False, [4, 4, 6, 7], [0, 0, 0, 1])]
    assert [e.content_hash for e in corpus.examples] == [json.loads(line)["content_hash"]
                                                         for line in WRITTEN_BEFORE.splitlines()]
    manifest = write_corpus(tmp_path / "again", corpus.examples, tokenizer)
    assert (tmp_path / "again" / "examples.jsonl").read_text() == WRITTEN_BEFORE
    assert manifest["content_hash"] == WRITTEN_BEFORE_HASH and manifest["truncated"] == 1


def test_a_corpus_line_missing_a_field_is_refused_naming_the_file_line_and_field(tmp_path):
    old = tmp_path / "old"
    old.mkdir()
    first, second, third = WRITTEN_BEFORE.splitlines()
    row = json.loads(second)
    del row["input_ids"], row["termination_reason"]  # the first is required; the second has a default
    (old / "examples.jsonl").write_text("\n".join([first, json.dumps(row), third]) + "\n")
    (old / "corpus.json").write_text(json.dumps({"content_hash": WRITTEN_BEFORE_HASH}))
    with pytest.raises(PdbgymError, match=r"examples\.jsonl:2: an example needs input_ids: rebuild"):
        load_corpus(old)
