"""Leak maps on one colour scale for the whole run, with what the control says of each example
in its heading: a map whose example moved its answer little is pale, not saturated red."""

from __future__ import annotations

import re

from ctxleak.report.html import Report
from ctxleak.report.leakmap import add_leak_section, flag_states, map_scales


def _record(rid: str, passage_values: list[float], token_values: list[float]) -> dict:
    spans = [[2 * j, 2 * j + 2] for j in range(len(passage_values))]
    return {"id": rid, "setting": "s", "influence": sum(token_values),
            "token_influence": token_values, "passage_influence": passage_values,
            "passage_spans": spans, "passages": ["p"] * len(passage_values),
            "max_passage": 1, "max_passage_influence": max(passage_values),
            "response": "r", "control_influence": 0.5}


RECORDS = [_record("big", [85.0, 1.0], [40.0, 2.0]), _record("small", [11.0, 0.5], [3.0, 1.0])]


def _tokens_of(i: int) -> tuple[list[str], list[str]]:
    return ["c"] * 4, ["y"] * 2


def _alphas(section: str) -> list[float]:
    return [float(a) for a in re.findall(r"rgba\(\d+,\d+,\d+,([0-9.]+)\)", section)]


def test_every_map_is_on_the_runs_scale_and_says_whether_it_is_flagged() -> None:
    report = Report("t", "t")
    states = {("big", "s"): "flagged beyond the control", ("small", "s"): "not flagged"}
    add_leak_section(report, RECORDS, _tokens_of, states=states)
    page = report.render()
    sections = dict(re.findall(r'<section class="leakmap" id="(ex-\d)">(.*?)</section>', page,
                               flags=re.S))
    big, small = sections["ex-0"], sections["ex-1"]
    assert "big · flagged beyond the control" in big and "small · not flagged" in small
    assert max(_alphas(big)) == 1.0
    # the small example's strongest passage is 11 of 85 nats: pale, where a scale of its own
    # would have made it full red
    assert max(_alphas(small)) == round(11.0 / 85.0, 3)
    assert "full red is 85 nats in the contexts and 40 nats in the responses" in page
    assert "+85 nats" in small  # its legend shows the run's scale


def test_scales_by_hand_and_when_nothing_is_positive() -> None:
    assert map_scales([(r, 4) for r in RECORDS]) == (85.0, 40.0)
    zero = _record("z", [0.0], [0.0])
    assert map_scales([(zero, 2)]) == (1.0, 1.0)


def test_flag_states_from_the_control_summary() -> None:
    summaries = [{"setting": "s", "control": {"enabled": True, "flagged": ["big"],
                                              "threshold": 4.0}}]
    unjudged = {**RECORDS[0], "id": "nocontrol", "control_influence": None}
    states = flag_states(summaries, [*RECORDS, unjudged])
    assert states == {("big", "s"): "flagged beyond the control",
                      ("small", "s"): "not flagged", ("nocontrol", "s"): "no control"}
    few = [{"setting": "s", "control": {"enabled": True, "flagged": [], "threshold": None}}]
    assert flag_states(few, RECORDS)[("big", "s")].startswith("not judged")


def test_each_map_says_what_its_context_colours_are() -> None:
    """A passage map says its colours are passages left out; a window map says n-grams; a
    run with neither says its contexts are not coloured, and says nothing of passages."""
    windowed = {**RECORDS[1], "id": "win", "passage_influence": None, "passage_spans": None,
                "windows": [[0, 2], [2, 4]], "window_influence": [3.0, 1.0], "ngram": 2,
                "max_window_influence": 3.0}
    report = Report("t", "t")
    add_leak_section(report, [RECORDS[0], windowed], _tokens_of)
    page = report.render()
    sections = dict(re.findall(r'<section class="leakmap" id="(ex-\d)">(.*?)</section>', page,
                               flags=re.S))
    assert "<h4>context: each passage&#x27;s influence (left out once)</h4>" in sections["ex-0"]
    assert "<h4>context: influence of the n-grams covering each token</h4>" in sections["ex-1"]
    assert "no n-gram windows" not in page
    bare = {**windowed, "id": "bare", "windows": None, "window_influence": None}
    report = Report("t", "t")
    add_leak_section(report, [bare], _tokens_of)
    page = report.render()
    assert "<h4>context: not coloured (no n-gram windows)</h4>" in page
    assert "This run computed no n-gram windows" in page
    assert "Examples with passages" not in page
    passages_only = Report("t", "t")
    add_leak_section(passages_only, RECORDS, _tokens_of)
    assert "This run computed no n-gram windows" not in passages_only.render()
