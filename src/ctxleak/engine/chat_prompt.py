"""An application's own chat messages as exact token ids: the messages (with ``{context}`` and
``{query}`` slots) rendered through the model's chat template, the slots filled, and the whole
text tokenised at once, as the application's call tokenised it. The context's tokens and each of
its pieces' are then located by the tokens' character offsets, so a prompt without the context
(or without one piece) is the same ids with those tokens left out ("Estimating Privacy Leakage
of Augmented Contextual Knowledge in Language Models", Def. 3.1 with S = the context or one
retrieved document).

A token that holds characters of the context and of the text around it (a tokenizer that merges
a document's last full stop with the line break after it) belongs to the context; one that holds
characters of two pieces belongs to both, so leaving either piece out leaves no character of it
in the prompt.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ctxleak.engine.lm import LanguageModel
from ctxleak.errors import ConfigError

_CONTEXT = "\u2063CTXLEAK_CONTEXT\u2063"
_QUERY = "\u2063CTXLEAK_QUERY\u2063"

#: Chat messages as (role, content) pairs; content in ``str.format`` syntax with the slots
#: ``{context}`` (once over all messages) and ``{query}`` (at most once).
Messages = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class WholePrompt:
    """A prompt tokenised whole: the ids before the context, the context's, those after it,
    each context piece's ``[start, end)`` span in the context's ids, and the prompt without
    the context tokenised whole."""

    before: tuple[int, ...]
    context: tuple[int, ...]
    after: tuple[int, ...]
    pieces: tuple[tuple[int, int], ...]
    empty: tuple[int, ...]
    without: tuple[tuple[int, ...], ...] = ()

    def extra(self, kept: int) -> dict[str, Any]:
        """The prompt parts' own ids of this prompt without the context (``empty_ids``) and
        without each piece (``exact``: by piece span), for a context kept to its first ``kept``
        tokens (a context cut short has no exact piece ids: its spans are others)."""
        whole = kept == len(self.context)
        return {"empty_ids": self.empty,
                "exact": tuple(zip(self.pieces, self.without)) if whole else ()}


def has_chat_template(lm: LanguageModel) -> bool:
    """Whether the model's tokenizer has a chat template to render messages through."""
    return bool(getattr(lm.tokenizer, "chat_template", None))


def render_messages(lm: LanguageModel, messages: Messages) -> str:
    """The messages through the model's chat template (the assistant header after them), as
    text holding one marker where ``{context}`` goes and at most one where ``{query}`` goes."""
    if not has_chat_template(lm):
        raise ConfigError(f"the model {lm.info.name} has no chat template to render the app's "
                          "messages through: score under ctxleak's template (app_prompt=False, "
                          "--no-app-prompt) or use a chat model", param="app_prompt")
    filled = [{"role": role, "content": content.format(context=_CONTEXT, query=_QUERY)}
              for role, content in messages]
    text = lm.tokenizer.apply_chat_template(filled, tokenize=False, add_generation_prompt=True)
    if not isinstance(text, str) or text.count(_CONTEXT) != 1 or text.count(_QUERY) > 1:
        raise ConfigError("the model's chat template did not render the app's messages with "
                          "their {context} once", param="prompt_messages")
    return text


def as_template(rendered: str) -> str:
    """A rendered text of :func:`render_messages` as a ``str.format`` template (literal braces
    doubled, the markers as ``{context}`` and ``{query}``): what the run's provenance shows."""
    text = rendered.replace("{", "{{").replace("}", "}}")
    return text.replace(_CONTEXT, "{context}").replace(_QUERY, "{query}")


def whole_prompt(lm: LanguageModel, rendered: str, pieces: Sequence[str], query: str,
                 leads: Sequence[int] = ()) -> WholePrompt:
    """The rendered messages with the context (``pieces`` joined) and the query filled in,
    tokenised whole (no special tokens added: the chat template wrote its own, as
    ``apply_chat_template(..., tokenize=True)`` does); the context's tokens and each piece's
    located by character offsets (see the module). ``leads[j]``: how many characters piece j
    starts with that join it to the one before (a separator); the first piece's span runs to
    the second's text, so that each piece left out leaves the text the pieces without it
    joined would be."""
    head, tail = rendered.replace(_QUERY, query).split(_CONTEXT)
    context = "".join(pieces)
    text = head + context + tail
    if not getattr(lm.tokenizer, "is_fast", False):
        raise ConfigError(f"the model {lm.info.name}'s tokenizer gives no character offsets (not a "
                          "fast tokenizer): the app's prompt cannot be tokenised whole",
                          param="app_prompt")
    enc = lm.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets = list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]
    c0, c1 = len(head), len(head) + len(context)
    t0, t1 = _token_range(offsets, c0, c1)
    spans, without, start = [], [], c0
    for j, piece in enumerate(pieces):
        lead = leads[1] if j == 0 and len(pieces) > 1 and len(leads) > 1 else 0
        a, b = _token_range(offsets, start, start + len(piece) + lead)
        spans.append((max(a, t0) - t0, min(b, t1) - t0))
        without.append(_ids(lm, text[:start] + text[start + len(piece) + lead:]))
        start += len(piece)
    return WholePrompt(tuple(ids[:t0]), tuple(ids[t0:t1]), tuple(ids[t1:]), tuple(spans),
                       _ids(lm, head + tail), tuple(without))


def _ids(lm: LanguageModel, text: str) -> tuple[int, ...]:
    """``text`` tokenised whole, no special tokens added."""
    return tuple(lm.tokenizer(text, add_special_tokens=False)["input_ids"])


def _token_range(offsets: Sequence[tuple[int, int]], start: int, end: int) -> tuple[int, int]:
    """``[first, last + 1)`` of the tokens holding a character of ``[start, end)``; for an empty
    range, the empty range before the first token at or after ``start``."""
    hit = [i for i, (s, e) in enumerate(offsets) if e > s and s < end and e > start]
    if hit and end > start:
        return hit[0], hit[-1] + 1
    first = next((i for i, (s, e) in enumerate(offsets) if s >= start and e > s), len(offsets))
    return first, first


__all__ = ["Messages", "WholePrompt", "as_template", "has_chat_template", "render_messages",
           "whole_prompt"]
