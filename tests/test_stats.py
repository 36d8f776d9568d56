"""Mergeable partial statistics."""

import numpy as np
import pytest

from volsweep.engine.stats import Partial, check_stats, finalize, merge


def test_merge_equals_whole_and_is_ordered():
    g = np.random.default_rng(0).normal(size=(3, 1000)) * [[1], [10], [100]] + 5
    whole = finalize(Partial.of(g))
    cuts = [0, 17, 400, 401, 1000]
    parts = [Partial.of(g[:, a:b]) for a, b in zip(cuts[:-1], cuts[1:])]
    merged = finalize(merge(parts))
    for k in whole:
        np.testing.assert_allclose(merged[k], whole[k], rtol=1e-12)
    np.testing.assert_allclose(whole["std"], g.std(axis=1), rtol=1e-10)
    np.testing.assert_allclose(whole["energy"], (g * g).sum(axis=1), rtol=1e-12)
    assert np.array_equal(whole["max"], g.max(axis=1)) and np.array_equal(whole["min"], g.min(axis=1))
    # fixed order: the same partials merged twice give bit-identical results
    again = finalize(merge(parts))
    assert all(np.array_equal(again[k], merged[k]) for k in merged)


def test_empty_partial_is_neutral():
    g = np.arange(12.0).reshape(2, 6)
    p = merge([Partial.empty(2), Partial.of(g)])
    assert p.count == 6 and np.array_equal(p.max, g.max(axis=1))


def test_from_array_roundtrip():
    g = np.random.default_rng(1).random((4, 50))
    p = Partial.of(g)
    q = Partial.from_array(50, np.stack([p.sum, p.sumsq, p.max, p.min], axis=1))
    assert all(np.array_equal(getattr(p, k), getattr(q, k)) for k in ("sum", "sumsq", "max", "min"))


def test_check_stats():
    assert check_stats("energy") == ("energy",)
    with pytest.raises(ValueError, match="stats"):
        check_stats(("energy", "median"))
    with pytest.raises(ValueError, match="stats"):
        check_stats(())
    with pytest.raises(ValueError, match="parts"):
        merge([])
