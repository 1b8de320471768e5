"""What ``ctxleak serve``'s settings read by name or as given: the app's chat messages
(``--prompt-messages``), checked as :class:`~ctxleak.proxy.config.ProxyConfig` takes them (the
operator's document classes are read by :mod:`ctxleak.run.classes`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ctxleak.errors import ConfigError


def prompt_messages_of(value: Any) -> tuple[tuple[str, str], ...]:
    """``prompt_messages`` as (role, content) pairs: a built-in name
    (:data:`~ctxleak.mitigations.prompts.NAMED_MESSAGES`), or messages as pairs or
    ``{"role", "content"}`` objects (``ctxleak serve --prompt-messages FILE`` reads a file with
    every check of the influence run's ``prompt_messages``)."""
    from ctxleak.mitigations.prompts import NAMED_MESSAGES

    if isinstance(value, str):
        if value not in NAMED_MESSAGES:
            raise ConfigError(f"prompt_messages: no built-in prompt named {value!r}; there are "
                              f"{', '.join(NAMED_MESSAGES)} (a file is read by ctxleak serve "
                              f"--prompt-messages)", param="prompt_messages")
        return NAMED_MESSAGES[value]
    out = []
    for item in value if isinstance(value, (list, tuple)) else ():
        pair = (item.get("role"), item.get("content")) if isinstance(item, Mapping) else item
        if not (isinstance(pair, (list, tuple)) and len(pair) == 2
                and all(isinstance(x, str) for x in pair)):
            raise ConfigError(f"prompt_messages: {item!r} is not a {{role, content}} message",
                              param="prompt_messages")
        out.append((pair[0], pair[1]))
    if sum(content.count("{context}") for _, content in out) != 1:
        raise ConfigError("prompt_messages: must be a non-empty list of messages with the slot "
                          "{context} exactly once", param="prompt_messages")
    return tuple(out)


__all__ = ["prompt_messages_of"]
