"""Numbers a user gives are read once, with the type and domain they name (issue 84): True is
not a number, 12.5 is not a count, NaN, ±inf and integers beyond float64 are refused in one
line naming the parameter."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ctxleak.domains import real, whole
from ctxleak.errors import ConfigError

HUGE = 10 ** 400  # 401 digits: shown cut to 20


@pytest.mark.parametrize("value, says", [
    (True, "must be a whole number, got True"), (12.5, "got 12.5"), (12.0, "got 12.0"),
    ("12", "got '12'"), (None, "needs a value"), (-1, "must be at least 0, got -1"),
    (HUGE + 1, "must be at most 1000, got 10000000000000000000…"),
])
def test_whole_refuses_what_is_not_a_count(value, says):
    with pytest.raises(ConfigError) as caught:
        whole(value, "n", minimum=0, maximum=1000)
    assert str(caught.value) == f"n {says}" or says in str(caught.value)
    assert caught.value.param == "n" and len(str(caught.value)) < 120


def test_whole_keeps_counts_of_any_integer_type():
    assert whole(np.int64(7), "n") == 7 and type(whole(np.int64(7), "n")) is int
    assert whole(None, "n", allow_none=True) is None and whole(0, "n", minimum=0) == 0


@pytest.mark.parametrize("value, says", [
    (True, "must be a number, got True"), (math.nan, "finite"), (-math.inf, "finite"),
    (HUGE, "must be a finite number, got 10000000000000000000…"), ("0.5", "got '0.5'"),
    (0.0, "must be in (0, 1), got 0"), (1.0, "must be in (0, 1), got 1"),
])
def test_real_refuses_what_is_not_in_its_domain(value, says):
    with pytest.raises(ConfigError, match=None) as caught:
        real(value, "confidence", minimum=0, maximum=1, strict_min=True, strict_max=True)
    assert says in str(caught.value) and caught.value.param == "confidence"


def test_real_names_a_flag_without_making_it_the_param():
    with pytest.raises(ConfigError) as caught:
        real(-2.0, "--clip", minimum=1e-100, maximum=1e100)
    assert str(caught.value) == "--clip must be a number from 1e-100 to 1e+100, got -2"
    assert caught.value.param is None
    assert real(4.9e-324, "x") == 4.9e-324 and real(3, "x") == 3.0  # its own domain says 0 is ok


def test_max_queries_is_a_count_wherever_it_is_given(tmp_path):
    from ctxleak.targets.base import FunctionTarget
    from ctxleak.targets.journal import AnswerJournal, JournaledTarget

    target = FunctionTarget(lambda q: "a", "f")
    with AnswerJournal(tmp_path / "a.db") as journal:
        for bad in (12.5, True, -1, "3", math.inf):
            with pytest.raises(ConfigError, match="max_queries") as caught:
                JournaledTarget(target, journal, max_queries=bad)
            assert caught.value.param == "max_queries"
        assert JournaledTarget(target, journal, max_queries=0).max_queries == 0


@pytest.mark.parametrize("keywords, param", [
    ({"max_queries": 12.5}, "max_queries"), ({"max_queries": True}, "max_queries"),
])
def test_the_attacks_refuse_a_max_queries_that_is_not_a_count(tmp_path, keywords, param):
    import ctxleak

    with pytest.raises(ConfigError) as caught:
        ctxleak.attack_extract(lambda q: "no", documents=["the code is 4471", "a blue door"],
                               output=str(tmp_path / "r"), progress=False, **keywords)
    assert caught.value.param == param
    assert not (tmp_path / "r").exists()  # refused before the run folder and the first query


@pytest.mark.parametrize("cls, keywords, param", [
    ("ExtractParams", {"batch": 8.5}, "batch"), ("ExtractParams", {"batch": True}, "batch"),
    ("ExtractParams", {"queries": 3.0}, "queries"), ("ExtractParams", {"queries": 0}, "queries"),
    ("ExtractParams", {"anchor_words": 2.5}, "anchor_words"),
    ("MembershipParams", {"confidence": True}, "confidence"),
    ("MembershipParams", {"confidence": "0.9"}, "confidence"),
    ("MembershipParams", {"resamples": 1000.5}, "resamples"),
    ("MembershipParams", {"eps_claimed": math.inf}, "eps_claimed"),
    ("MembershipParams", {"eps_claimed": True}, "eps_claimed"),
])
def test_attack_params_read_their_numbers_once(cls, keywords, param):
    from ctxleak.methods.attacks import attack_method

    with pytest.raises(ConfigError) as caught:
        getattr(attack_method, cls)(**keywords)
    assert caught.value.param == param and "\n" not in str(caught.value)


@pytest.mark.parametrize("keywords, param", [
    ({"subset_size": 8.5}, "subset_size"), ({"n_gen": True}, "n_gen"),
    ({"clip": HUGE}, "clip"), ({"temperature": True}, "temperature"),
    ({"min_tokens": 0.5}, "min_tokens"),
])
def test_the_audit_reads_its_numbers_once(keywords, param):
    from ctxleak.methods.audit.method import audit_config

    with pytest.raises(ConfigError) as caught:
        audit_config(**keywords)
    assert caught.value.param == param and len(str(caught.value)) < 120


@pytest.mark.parametrize("keywords, param", [
    ({"max_tokens": 12.5}, "max_tokens"), ({"max_tokens": True}, "max_tokens"),
    ({"temperature": math.inf}, "temperature"), ({"concurrency": 2.0}, "concurrency"),
    ({"timeout_s": math.nan}, "timeout_s"), ({"retries": -1}, "retries"),
    ({"rate_per_s": 0}, "rate_per_s"), ({"backoff_s": "1"}, "backoff_s"),
])
def test_an_endpoint_target_reads_its_numbers_once(keywords, param):
    from ctxleak.targets.endpoint import ChatEndpointTarget

    with pytest.raises(ConfigError) as caught:
        ChatEndpointTarget("http://127.0.0.1:9/v1", "m", **keywords)
    assert caught.value.param == param and "\n" not in str(caught.value)


def test_a_served_claim_beyond_float64_is_a_value_error_not_an_overflow():
    from ctxleak.targets.endpoint import served_claim

    with pytest.raises(ValueError, match="bounded answer"):
        served_claim({"mode": "bounded", "epsilon": HUGE, "tokens": 3})
