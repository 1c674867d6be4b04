"""Generated GGUF pairs: seeded, cached, validated."""

from __future__ import annotations

import pytest

from specexp.core.tinymodels import TinyPairSpec, ensure_pair, pair_paths

SMALL = dict(
    vocab_size=400, embedding_length=64, feed_forward_length=128, head_count=4, target_layers=3
)


def test_pair_is_generated_once_then_cached(tmp_path):
    spec = TinyPairSpec(**SMALL)
    paths = ensure_pair(spec, cache_dir=tmp_path)
    assert paths.target.read_bytes()[:4] == paths.draft.read_bytes()[:4] == b"GGUF"
    assert paths.target.stat().st_size > paths.draft.stat().st_size  # the padded layers
    stamp = paths.target.stat().st_mtime_ns
    assert ensure_pair(spec, cache_dir=tmp_path) == paths
    assert paths.target.stat().st_mtime_ns == stamp
    assert not list(tmp_path.rglob("*.partial"))


def test_generation_is_deterministic_and_keyed_by_every_knob(tmp_path):
    a = ensure_pair(TinyPairSpec(**SMALL), cache_dir=tmp_path / "a")
    b = ensure_pair(TinyPairSpec(**SMALL), cache_dir=tmp_path / "b")
    assert a.target.read_bytes() == b.target.read_bytes()
    assert (
        pair_paths(TinyPairSpec(**SMALL, divergence=0.5)).target
        != pair_paths(TinyPairSpec(**SMALL)).target
    )
    assert (
        pair_paths(TinyPairSpec(**SMALL, seed=1)).target != pair_paths(TinyPairSpec(**SMALL)).target
    )


@pytest.mark.parametrize(
    "bad,message",
    [
        (dict(draft_layers=4, target_layers=3), "draft_layers <= target_layers"),
        (dict(embedding_length=65), "multiple of head_count"),
        (dict(vocab_size=100000), "vocab_size must be in"),
        (dict(divergence=-0.1), "divergence must be >= 0"),
    ],
)
def test_invalid_specs_are_rejected_before_writing(tmp_path, bad, message):
    with pytest.raises(ValueError, match=message):
        ensure_pair(TinyPairSpec(**{**SMALL, **bad}), cache_dir=tmp_path)
    assert not any(tmp_path.iterdir())
