"""A student whose tokenizer is not the cache's is refused, even when the vocabulary sizes agree."""

from __future__ import annotations

import numpy as np
import pytest
from div_models import VOCAB, make_record, tiny_model

from pdbgym.divergence.loading import VocabMismatchError, load_tokenizer_if_any
from pdbgym.divergence.pipeline import DivergenceRun, run_divergence
from pdbgym.divergence.scoring import ScoringConfig
from pdbgym.rollouts.cache import write_cache
from pdbgym.rollouts.record import LogprobSemantics, tokenizer_fingerprint
from pdbgym.rollouts.validate import validate_cache

from modelfixtures import word_tokenizer

SEMANTICS = LogprobSemantics(engine="test", temperature=1.0, top_p=1.0, top_p_renormalized=False)


IDENTITY = list(range(VOCAB))
SWAPPED = [1, 0, *range(2, VOCAB)]  # the same tokens, two ids exchanged: same size, other tokenizer


def test_fingerprint_tells_apart_tokenizers_of_one_size_and_survives_a_round_trip(tmp_path) -> None:
    same, other = word_tokenizer(VOCAB, IDENTITY), word_tokenizer(VOCAB, SWAPPED)
    assert len(same) == len(other) == VOCAB
    assert tokenizer_fingerprint(same) == tokenizer_fingerprint(word_tokenizer(VOCAB, IDENTITY))
    assert tokenizer_fingerprint(same) != tokenizer_fingerprint(other)
    same.save_pretrained(tmp_path / "tok")
    assert tokenizer_fingerprint(load_tokenizer_if_any(tmp_path / "tok")) == tokenizer_fingerprint(same)
    assert load_tokenizer_if_any(tmp_path / "nothing-here") is None


def _records(fingerprints: list[str]):
    rng = np.random.default_rng(3)
    records = []
    for index, fingerprint in enumerate(fingerprints):
        record = make_record(rng, f"task{index}", 5, 12, semantics=SEMANTICS)
        record.metadata["tokenizer"] = {"name": "words", "vocab_size": VOCAB, "fingerprint": fingerprint}
        records.append(record)
    return records


@pytest.mark.slow
def test_scoring_refuses_a_student_with_another_tokenizer_of_the_same_size(tmp_path) -> None:
    cache_tokenizer = word_tokenizer(VOCAB, IDENTITY)
    records = _records([tokenizer_fingerprint(cache_tokenizer)] * 2)
    for name, order in (("same", IDENTITY), ("other", SWAPPED), ("bare", None)):
        tiny_model("qwen3", seed=1).save_pretrained(tmp_path / name)
        if order is not None:
            word_tokenizer(VOCAB, order).save_pretrained(tmp_path / name)
    quiet = ScoringConfig(show_progress=False)
    same, bare = run_divergence(DivergenceRun(records, SEMANTICS, [str(tmp_path / "same"), str(tmp_path / "bare")],
                                              scoring=quiet, device="cpu"))
    assert same.name == "same" and bare.name == "bare"  # no tokenizer beside the model: the size check only
    with pytest.raises(VocabMismatchError, match="fingerprint"):
        run_divergence(DivergenceRun(records, SEMANTICS, [str(tmp_path / "other")], scoring=quiet, device="cpu"))


def test_a_cache_mixing_tokenizers_is_invalid(tmp_path) -> None:
    write_cache(tmp_path / "mixed", _records(["aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb"]))
    assert any("2 different tokenizers" in e for e in validate_cache(tmp_path / "mixed"))
    write_cache(tmp_path / "one", _records(["aaaaaaaaaaaaaaaa", "aaaaaaaaaaaaaaaa"]))
    assert validate_cache(tmp_path / "one") == []
