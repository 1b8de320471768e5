"""An echoed upstream API key is masked in every form issue 84 names (interleaved with
zero-width characters, \\u-escaped, hex-encoded, reversed) as well as plain and spelled out, by
the proxy's mask, the served client's and the chat-endpoint target's; only the key is
replaced, so a JSON body stays JSON with its other escapes intact."""

from __future__ import annotations

import json

import pytest

from ctxleak.engine.key_mask import decoded_view, key_forms, mask_key
from ctxleak.proxy.errors import secret_mask
from ctxleak.targets.endpoint import KEY_MASK, KeyMask

KEY = "sk-upstream-9f8e7d6c5b4a3210"
FORMS = {
    "plain": KEY,
    "zero-width": "\u200b".join(KEY),
    "word joiners, reversed": "\u2060".join(KEY[::-1]),
    "soft hyphens and bidi": "\u00ad".join(KEY[:14]) + "\u202a" + KEY[14:-1] + "\u202c" + KEY[-1],
    "u-escaped": "".join(f"\\u{ord(c):04x}" for c in KEY),
    "u-escaped upper, half": KEY[:9] + "".join(f"\\u{ord(c):04X}" for c in KEY[9:]),
    "hex": KEY.encode().hex(),
    "HEX": KEY.encode().hex().upper(),
    "reversed": KEY[::-1],
}


def leaks(text: str) -> bool:
    """Whether ``text`` still shows the key, or 8 of its characters in a row, in any form."""
    view = decoded_view(text)
    seen = view[0] if view else text
    return any(part in seen for part in key_forms(KEY))


@pytest.mark.parametrize("name", FORMS)
def test_the_proxy_masks_the_key_in_a_json_body(name: str) -> None:
    body = json.dumps({"error": {"message": f"invalid key {FORMS[name]} \\u0022 x"}})
    assert leaks(body)
    out = secret_mask(KEY)(body)
    assert not leaks(out)
    # only the key was replaced: the body is JSON, its other escape kept
    assert json.loads(out)["error"]["message"] == "invalid key *** \\u0022 x"


@pytest.mark.parametrize("name", FORMS)
def test_the_served_client_masks_the_key(name: str) -> None:
    out = mask_key(f"server said: {FORMS[name]}.", key_forms(KEY))
    assert out == "server said: ***."


@pytest.mark.parametrize("name", [*FORMS, "spaced"])
def test_an_answer_echoing_the_key_stores_the_mask(name: str) -> None:
    form = " ".join(KEY) if name == "spaced" else FORMS[name]
    out = KeyMask(KEY)(f"Sure, the key is {form} as asked")
    assert out == f"Sure, the key is {KEY_MASK} as asked"


def test_text_without_the_key_is_left_as_it_is() -> None:
    text = '{"a": "caf\\u00e9 \\u200b \\\\u0041 \u200b", "hex": "deadbeef", "b": "pu-maetspu"}'
    assert secret_mask(KEY)(text) == text
    assert mask_key(text, key_forms(KEY)) == text


def test_the_decoded_view_maps_back_to_the_escapes() -> None:
    text = "a\\u0062\u200bc"
    seen, starts, ends = decoded_view(text) or ("", [], [])
    assert seen == "abc"
    assert [text[a:b] for a, b in zip(starts, ends)] == ["a", "\\u0062", "c"]
