"""The bounds on what one request may ask of the privacy proxy, each checked before anything is
reserved or decoded and each a 4xx naming the request field: the number of chat messages and the
characters of each (read with the body, before any text is joined or tokenised), and the
prompt's tokens against the model's window (counted once, on the very prompt the answer would
decode: the query slot holding every message, with no document). The body's bytes
(``max_body_bytes``, HTTP 413), the documents a request gives (``max_documents``) and the prompt
streams a mechanism decodes at once (``max_streams``: a vote's voters) are bounded where they
are read (:mod:`ctxleak.proxy.app`, :mod:`ctxleak.proxy.request`).

Without the window check, a prompt longer than the model's window would still be decoded (the
documents are cut to fit, the query never is), holding the decoder for as long as its length
takes; with it, a request's decoding is bounded by ``window`` positions."""

from __future__ import annotations

from typing import Any

from ctxleak.engine.lm import LanguageModel
from ctxleak.mitigations.prompts import app_chat_prompt, template_prompt
from ctxleak.proxy.chat_request import ChatRequest
from ctxleak.proxy.config import ProxyConfig
from ctxleak.proxy.request import ProxyError, over_limit


def _chars(message: Any) -> int:
    """How many characters message's text has (0 for a part that is not text: refused later,
    by name, where the text is read)."""
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return len(content)
    if isinstance(content, list):
        return sum(len(p["text"]) for p in content
                   if isinstance(p, dict) and isinstance(p.get("text"), str))
    return 0


def check_messages(messages: Any, config: ProxyConfig) -> None:
    """At most ``max_messages`` messages (HTTP 400 ``over_limit`` on ``messages``), each of at
    most ``max_message_chars`` characters (HTTP 413 ``message_too_long`` on
    ``messages[k].content``): checked on the parsed body, before any text is joined."""
    if not isinstance(messages, list):
        return  # refused by name where the prompt is read
    if len(messages) > config.max_messages:
        raise over_limit("messages", f"{len(messages)} messages, more than this proxy's "
                                     f"max_messages of {config.max_messages} per request")
    for k, message in enumerate(messages):
        chars = _chars(message)
        if chars > config.max_message_chars:
            param = f"messages[{k}].content"
            raise ProxyError(413, f"{param}: {chars} characters, more than this proxy's "
                                  f"max_message_chars of {config.max_message_chars}",
                             param=param, code="message_too_long")


def prompt_tokens(lm: LanguageModel, request: ChatRequest) -> int:
    """The tokens of ``request``'s prompt without any document: ctxleak's template holding the
    messages in its query slot, or the app's chat messages holding the user's question."""
    if request.messages is not None:
        return len(app_chat_prompt(lm, request.messages, request.question)([]))
    return len(template_prompt(lm, request.query)([]))


def check_prompt(lm: LanguageModel, request: ChatRequest) -> int:
    """The prompt's tokens (:func:`prompt_tokens`), which with ``max_tokens`` new ones must fit
    the model's window (its positions), else HTTP 413 ``prompt_too_long`` on ``messages``
    saying the arithmetic. A model whose window is unknown is not checked."""
    window = lm.max_length
    tokens = prompt_tokens(lm, request)
    if window is not None and tokens + request.max_tokens > window:
        room = window - request.max_tokens
        raise ProxyError(413, f"messages: the prompt is {tokens} tokens, and with max_tokens "
                              f"{request.max_tokens} it needs {tokens + request.max_tokens} "
                              f"positions, more than the model's window of {window}: send at "
                              f"most {max(room, 0)} prompt tokens (the documents are cut to "
                              f"what is left, the messages never are)",
                         param="messages", code="prompt_too_long")
    return tokens


__all__ = ["check_messages", "check_prompt", "prompt_tokens"]
