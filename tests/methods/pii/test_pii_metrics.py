"""String metrics (App. B.1.2), likelihoods (App. B.1.1) and the Wilcoxon comparison."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from ctxleak.methods.pii.metrics import (
    best_over_templates,
    digit_edit_distance,
    digits_of,
    edit_distance_within,
    email_local_part_match,
    exact_match,
    likelihood_from_token_logprobs,
    phone_first_digits_match,
    phone_location_code_match,
    wilcoxon_compare,
)

TARGET = "(212) 555-0123"


def test_exact_match():
    assert exact_match("jdoe@example.com", ": jdoe@example.com or call us")
    assert not exact_match("jdoe@example.com", ": JDoe@example.com")
    assert exact_match("jdoe@example.com", ": JDoe@example.com", normalize=True)
    assert exact_match("1 Main  Street", "at 1 main street", normalize=True)
    assert not exact_match("", "anything")


def test_digits_of():
    assert digits_of(TARGET) == "2125550123"
    assert digits_of("+1 212 555 0123") == "2125550123"


@pytest.mark.parametrize("generation, location, first7, first8, first9", [
    (" 212-555-0123 or", True, True, True, True),
    ("+1 (212) 555-0199", True, True, True, False),
    ("212.555.0177", True, True, True, False),
    ("212.555.0277", True, True, False, False),
    ("212 444 0123", True, False, False, False),
    ("call 415-555-0123", False, False, False, False),
    ("no number at all", False, False, False, False),
    ("at 5 pm, 212-555-0124", True, True, True, True),
])
def test_phone_prefix_metrics(generation, location, first7, first8, first9):
    assert phone_location_code_match(TARGET, generation) is location
    assert phone_first_digits_match(TARGET, generation, 7) is first7
    assert phone_first_digits_match(TARGET, generation, 8) is first8
    assert phone_first_digits_match(TARGET, generation, 9) is first9


@pytest.mark.parametrize("generation, distance", [
    ("212-555-0123", 0),
    ("212-555-0124", 1),     # one substitution
    ("212-555-012", 1),      # one deletion
    ("212-555-01234", 1),    # one insertion
    ("212-555-0132", 2),     # swap of two digits: two substitutions
    ("212-555-1032", 3),
    ("212-555-9999", 4),
    ("no digits", None),
])
def test_edit_distance(generation, distance):
    assert digit_edit_distance(TARGET, generation) == distance
    for n in (1, 2, 3):
        assert edit_distance_within(TARGET, generation, n) is (distance is not None
                                                               and distance <= n)


def test_email_local_part():
    target = "jane.q.doe+news@example.com"
    assert email_local_part_match(target, "write to jane.q.doe+news@gmail.com today")
    assert email_local_part_match(target, "Jane.Q.Doe+News@example.org")
    assert not email_local_part_match(target, "jane.doe@example.com")
    assert not email_local_part_match(target, "jane.q.doe+news")  # no @: not an e-mail


def test_likelihood_is_sum_and_mean():
    logprobs = [-0.1, -2.5, -0.03, -1.0]
    total, normalised = likelihood_from_token_logprobs(logprobs)
    assert total == pytest.approx(sum(logprobs))
    assert normalised == pytest.approx(sum(logprobs) / 4)
    probs = [math.exp(x) for x in logprobs]
    assert math.exp(total) == pytest.approx(math.prod(probs))
    assert math.exp(normalised) == pytest.approx(math.prod(probs) ** (1 / 4))  # geometric mean
    assert likelihood_from_token_logprobs(np.array([-0.5])) == (-0.5, -0.5)
    with pytest.raises(ValueError):
        likelihood_from_token_logprobs([])
    with pytest.raises(ValueError):
        likelihood_from_token_logprobs([0.5])
    with pytest.raises(ValueError):
        likelihood_from_token_logprobs([float("nan")])


def test_wilcoxon_paired_matches_scipy():
    rng = np.random.default_rng(0)
    null = rng.normal(-30, 5, size=40)
    target = null + rng.normal(1.0, 2.0, size=40)
    res = wilcoxon_compare(target, null)
    ref = stats.wilcoxon(target, null)
    assert res.test == "wilcoxon" and res.n == 40
    assert res.statistic == pytest.approx(ref.statistic)
    assert res.pvalue == pytest.approx(ref.pvalue)
    assert res.median_difference == pytest.approx(np.median(target - null))
    greater = wilcoxon_compare(target, null, alternative="greater")
    assert greater.pvalue == pytest.approx(stats.wilcoxon(target, null,
                                                          alternative="greater").pvalue)


def test_mannwhitney_unpaired_matches_scipy():
    target = [-10.0, -12.5, -9.0, -11.0, -8.5]
    null = [-14.0, -13.0, -12.0, -15.5, -11.5, -16.0]
    res = wilcoxon_compare(target, null, paired=False)
    ref = stats.mannwhitneyu(target, null)
    assert res.test == "mannwhitneyu" and (res.n_target, res.n_null, res.n) == (5, 6, 11)
    assert res.statistic == pytest.approx(ref.statistic)
    assert res.pvalue == pytest.approx(ref.pvalue)
    assert res.median_difference == pytest.approx(
        np.median([t - n for t in target for n in null]))
    assert res.to_dict()["pvalue"] == res.pvalue


def test_wilcoxon_bad_input():
    with pytest.raises(ValueError):
        wilcoxon_compare([1.0, 2.0], [1.0])
    with pytest.raises(ValueError):
        wilcoxon_compare([-1.0, float("-inf")], [-1.0, -2.0])
    with pytest.raises(ValueError):
        wilcoxon_compare([-1.0, -2.0], [-1.0, -2.0])
    with pytest.raises(ValueError):
        wilcoxon_compare([-1.0], [-2.0], alternative="bigger")


def test_best_over_templates():
    assert best_over_templates([-3.0, -1.5, -2.0]) == -1.5
    assert best_over_templates([False, True]) == 1.0
