"""The leak map's numbers (paper 000, Def. 3.2 windows): per-token means of covering windows,
computed by hand on tiny cases, and the rankings."""

from __future__ import annotations

import pytest

from ctxleak.methods.influence.leakmap import context_token_scores, ranked_examples, top_passages
from ctxleak.methods.influence.ngrams import windows


def test_stride_one_windows_average_over_the_windows_covering_each_token() -> None:
    spans = windows(5, 2, stride=1)  # [0,2) [1,3) [2,4) [3,5)
    assert spans == [(0, 2), (1, 3), (2, 4), (3, 5)]
    scores = context_token_scores(5, spans, [1.0, 3.0, 5.0, 7.0])
    assert scores == [1.0, 2.0, 4.0, 6.0, 7.0]


def test_default_stride_gives_each_token_its_window_and_uncovered_tokens_none() -> None:
    assert context_token_scores(5, windows(5, 2), [0.5, 1.5, 2.5]) == [0.5, 0.5, 1.5, 1.5, 2.5]
    assert context_token_scores(4, [(1, 2)], [9.0]) == [None, 9.0, None, None]


def test_bad_windows_are_refused() -> None:
    with pytest.raises(ValueError, match="outside"):
        context_token_scores(3, [(2, 4)], [1.0])
    with pytest.raises(ValueError, match="2 windows but 1"):
        context_token_scores(3, [(0, 1), (1, 2)], [1.0])


def test_rankings() -> None:
    records = [{"influence": 0.2, "window_influence": [0.1, 0.9]},
               {"influence": 0.7, "window_influence": [0.3]},
               {"influence": 0.2}]
    assert ranked_examples(records) == [1, 0, 2]
    assert top_passages(records, k=2) == [(0, 1), (1, 0)]
    assert top_passages(records) == [(0, 1), (1, 0), (0, 0)]
