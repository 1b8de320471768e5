"""The frontier read back typed where it is shown (issue 80): the report's tables, notes and
plot and the sweep verdict read a saved frontier once, by attribute; what it reads back is what
was saved; a renamed or missing column is an error naming the row and the key, not an empty
column; a frontier saved before a field existed still reads."""

from __future__ import annotations

import pytest

from ctxleak.errors import InputError
from ctxleak.methods.influence.metrics import mean_with_ci
from ctxleak.methods.influence.verdict import caveat_lines
from ctxleak.methods.tradeoff.frontier import frontier, frontier_of
from ctxleak.methods.tradeoff.rows import Frontier
from ctxleak.report.frontier import compact_rows, frontier_rows, notes

N = 40  # questions per setting: enough to recommend (30)
# λ: (leak above control, nats per token; F1 per question)
SETTINGS = {0.0: (0.1, [0.4] * N), 0.5: (0.4, [0.6] * N), 1.0: (1.0, [0.62] * N)}


def _settings():
    """Three settings of a λ sweep, the last also bounded at ε = 2 claiming ε = 24 per
    response over the whole context."""
    out = [{"setting": f"lambda={lam:g},T=0.8,context=all", "lambda": lam,
            "temperature": 0.8, "n": N, "f1": mean_with_ci(f1),
            "rouge_l": mean_with_ci([0.5] * N),
            "influence_per_token": mean_with_ci([2 * leak] * N),
            "control": {"enabled": True, "above_control_per_token": mean_with_ci([leak] * N)}}
           for lam, (leak, f1) in SETTINGS.items()]
    out.append({**out[2], "setting": "lambda=1,T=0.8,context=all,eps=2", "bounded_eps": 2.0,
                "claim": {"relation": "context", "eps": {"mean": 24.0}, "delta": 0.0},
                "tokens_paid": {"mean": 3.0}})
    return out


def test_what_is_saved_reads_back_by_attribute():
    front = frontier(_settings())
    read = Frontier.read(front)
    assert read.to_dict() == front == frontier_of(_settings()).to_dict()
    # by hand: the best F1 is 0.62 (λ = 1, leak 1.0); 90 % of it is 0.558; λ = 0.5 keeps it
    # (0.6) at less leak, λ = 0 (0.4) does not
    assert read.recommended == "lambda=0.5,T=0.8,context=all" and read.utility == "F1"
    half, bounded = read.rows[1], read.rows[3]
    assert half.utility.mean == pytest.approx(0.6) and half.privacy.mean == pytest.approx(0.4)
    assert half.utility_kept == pytest.approx(0.6 / 0.62) and half.pareto
    assert bounded.guarantee.eps == 24.0 and bounded.guarantee.relation == "context"
    assert bounded.label == "λ = 1, ε = 2" and bounded.score("rouge_l").value.mean == 0.5


def _refused(show, front, *words):
    with pytest.raises(InputError) as err:
        show(front)
    for word in words:
        assert word in str(err.value), str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("show", [frontier_rows, compact_rows, notes])
def test_a_renamed_column_is_an_error_naming_the_row_and_the_key(show):
    front = frontier(_settings())
    front["rows"][2]["privacy_mean"] = front["rows"][2].pop("privacy")
    _refused(show, front, "the frontier.rows[2]", "'privacy'", "renamed? it has 'privacy_mean'")
    front = frontier(_settings())
    del front["recommendation"]
    _refused(show, front, "the frontier has no 'recommendation'")
    front = frontier(_settings())
    front["skipped"] = [{"setting": "x", "label": "x"}]
    _refused(show, front, "the frontier.skipped[0] has no 'reason'")


def test_a_frontier_saved_before_later_fields_still_reads():
    front = frontier(_settings())
    old = {k: v for k, v in front.items() if k not in ("skipped", "resolved", "facts",
                                                        "fact_note")}
    old["rows"] = [{k: v for k, v in r.items() if not k.startswith(("match", "exact_match"))}
                   for r in front["rows"]]
    assert frontier_rows(old) == frontier_rows(front)
    assert compact_rows(old) == compact_rows(front) and notes(old) == notes(front)
    read = Frontier.read(old)
    assert read.skipped == () and read.resolved is None
    assert read.rows[0].score("match").value.mean is None


def test_the_verdicts_caveats_read_the_typed_frontier():
    settings = _settings()
    for s in settings:
        s["control"] = {"enabled": False, "reason": "turned off"}
    lines = caveat_lines(frontier_of(settings), settings)
    assert lines == ["Note: privacy is the mean influence per token, not the influence above "
                     "a control: 4 of 4 setting(s) have no control (turned off)."]
