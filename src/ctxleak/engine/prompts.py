"""Prompts as exact token ids: template pieces and slot values are tokenised separately
and concatenated, so every variant of a prompt (full, ablated, empty context) is built the same way
and the token positions of each slot are known exactly.
"""

from __future__ import annotations

import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ctxleak.engine.lm import LanguageModel
from ctxleak.errors import ConfigError

_SENTINEL = "\u2063CTXLEAK_SLOT\u2063"


@dataclass(frozen=True)
class Prompt:
    """Token ids of a prompt and the ``[start, end)`` span of each named slot in them."""

    ids: tuple[int, ...]
    spans: Mapping[str, tuple[int, int]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.ids)

    def slot(self, name: str) -> tuple[int, ...]:
        start, end = self.spans[name]
        return self.ids[start:end]


def template_fields(template: str) -> list[str]:
    """Slot names of a ``str.format`` template, e.g. ``["context", "query"]``."""
    return [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]


def chat_wrapper(lm: LanguageModel) -> tuple[list[int], list[int]]:
    """Ids before and after a single user message in the model's chat template (with the
    assistant header after it), found by rendering the template around a sentinel."""
    cached: tuple[list[int], list[int]] | None = getattr(lm, "_chat_wrapper", None)
    if cached is not None:
        return cached
    text = lm.tokenizer.apply_chat_template(
        [{"role": "user", "content": _SENTINEL}], tokenize=False, add_generation_prompt=True)
    if text.count(_SENTINEL) != 1:
        raise ConfigError("the model's chat template did not render a single user message")
    before, after = text.split(_SENTINEL)
    bos = lm.tokenizer.bos_token
    if bos and before.startswith(bos) and lm.bos_ids:
        before = before[len(bos):]  # the BOS id is added once, by build_prompt
    wrapper = (lm.encode(before), lm.encode(after))
    lm._chat_wrapper = wrapper  # type: ignore[attr-defined]
    return wrapper


def build_prompt(lm: LanguageModel, template: str, slots: Mapping[str, str | Sequence[int]],
                 chat: bool | None = None) -> Prompt:
    """Fill ``template`` (``str.format`` syntax) with ``slots`` given as text or token ids.

    Literal pieces of the template and text slots are tokenised separately (no special tokens)
    and their ids concatenated; the model's BOS ids come first, and with ``chat`` (default: the
    model's chat-template setting) the whole is wrapped as one user turn followed by the
    assistant header. Empty slots contribute no ids (``Document: . {query}``, Fig. 6 of
    "Estimating Privacy Leakage of Augmented Contextual Knowledge in Language Models").
    """
    use_chat = lm.use_chat_template if chat is None else chat
    ids: list[int] = list(lm.bos_ids)
    if use_chat:
        ids += chat_wrapper(lm)[0]
    spans: dict[str, tuple[int, int]] = {}
    for literal, name, spec, conv in string.Formatter().parse(template):
        if literal:
            ids += lm.encode(literal)
        if name is None:
            continue
        if spec or conv:
            raise ConfigError(f"template slot '{{{name}}}' may not have a format spec")
        if name not in slots:
            raise ConfigError(f"template needs a value for '{{{name}}}'")
        value = slots[name]
        piece = lm.encode(value) if isinstance(value, str) else [int(i) for i in value]
        spans[name] = (len(ids), len(ids) + len(piece))
        ids += piece
    if use_chat:
        ids += chat_wrapper(lm)[1]
    return Prompt(ids=tuple(ids), spans=spans)


def fit_to_window(lm: LanguageModel, template: str, slots: Mapping[str, str | Sequence[int]], *,
                  cut: str = "context", reserve: int = 0) -> tuple[Prompt, int]:
    """:func:`build_prompt`, with the end of slot ``cut`` removed until the prompt plus
    ``reserve`` new tokens fits the model's window (keep the query and the start of
    the context). Returns the prompt and how many of the slot's tokens were cut (0 if none)."""
    prompt = build_prompt(lm, template, slots)
    window = lm.max_length
    if window is None or len(prompt) + reserve <= window or cut not in prompt.spans:
        return prompt, 0
    start, end = prompt.spans[cut]
    dropped = min(end - start, len(prompt) + reserve - window)
    ids = prompt.ids[:end - dropped] + prompt.ids[end:]
    spans = {name: (a - dropped if a >= end else a, b - dropped if b >= end else b)
             for name, (a, b) in prompt.spans.items()}
    spans[cut] = (start, end - dropped)
    return Prompt(ids=ids, spans=spans), dropped
