"""The claim of a ``ctxleak serve`` answer is read with the numbers' one reader (issue 84):
JSON ``true`` is not an ε of 1, ``7.5`` is not a count of tokens; each refusal is one line
naming the field, through the endpoint target too."""

from __future__ import annotations

import pytest
from helpers.fake_chat import Reply, completion, fake_chat

from ctxleak.mitigations.mechanisms import Claim
from ctxleak.targets.base import TargetError
from ctxleak.targets.endpoint import ChatEndpointTarget, served_claim

MECHANISM = {"mode": "mechanism", "epsilon": 2.0, "delta": 1e-4, "relation": "document"}
BOUNDED = {"mode": "bounded", "epsilon": 0.25, "tokens": 6}


@pytest.mark.parametrize("field,name", [
    ({**MECHANISM, "epsilon": True}, "epsilon"),
    ({**MECHANISM, "epsilon": "2"}, "epsilon"),
    ({**MECHANISM, "epsilon": -1.0}, "epsilon"),
    ({**MECHANISM, "delta": False}, "delta"),
    ({**MECHANISM, "delta": 2}, "delta"),
    ({**MECHANISM, "relation": 5}, "relation"),
    ({**BOUNDED, "epsilon": True}, "epsilon"),
    ({**BOUNDED, "tokens": True}, "tokens"),
    ({**BOUNDED, "tokens": 7.5}, "tokens"),
    ({**BOUNDED, "tokens": -1}, "tokens"),
    ({"mode": "lambda", "lambda": True}, "lambda"),
    ({"mode": "lambda", "lambda": float("nan")}, "lambda"),
])
def test_a_field_that_is_not_its_number_is_one_line_naming_it(field, name):
    with pytest.raises(ValueError) as caught:
        served_claim(field)
    message = str(caught.value)
    assert name in message and "\n" not in message and message.startswith(f"{field['mode']} ")


def test_the_numbers_still_read_by_hand():
    assert served_claim(MECHANISM) == Claim(2.0, 1e-4, "document")
    assert served_claim({**MECHANISM, "delta": None}) == Claim(2.0, 0.0, "document")
    assert served_claim({**MECHANISM, "epsilon": 3}) == Claim(3.0, 1e-4, "document")
    assert served_claim(BOUNDED) == Claim(1.5, 0.0, "context")  # 0.25 per token, 6 tokens
    assert served_claim({"mode": "lambda", "lambda": 0}) == Claim(0.0, 0.0, "context")


def test_an_endpoint_answering_true_for_its_epsilon_is_refused():
    def reply(body, headers):
        return Reply(body={**completion("ok"), "ctxleak": {**BOUNDED, "epsilon": True}})

    with fake_chat(reply) as server, pytest.raises(TargetError) as caught:
        ChatEndpointTarget(server.url, "m").answer(["q ?"])
    assert "claim cannot be read" in str(caught.value) and "epsilon" in str(caught.value)
    assert "\n" not in str(caught.value)
