"""What ``ctxleak serve``'s settings read from files or names: the operator's document classes
(``--classes``) and the app's chat messages (``--prompt-messages``), each checked as
:class:`~ctxleak.proxy.config.ProxyConfig` takes it."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ctxleak.errors import ConfigError


def read_classes(path: str | Path) -> dict[str, str]:
    """The operator's class of each document: a JSONL or CSV file of rows with ``id`` and
    ``class`` (``ctxleak serve --classes FILE``). An id given twice with two classes, a missing
    or empty field, is an error naming the file, line and field."""
    from ctxleak.errors import InputError
    from ctxleak.run.records import iter_rows

    out: dict[str, str] = {}
    for row in iter_rows(Path(path), required=("id", "class")):
        doc, cls = row.text("id"), row.text("class")
        if out.get(doc, cls) != cls:
            raise InputError(f"document {doc!r} is given class {cls!r} here and "
                             f"{out[doc]!r} above", file=row.file, line=row.line, field="class")
        out[doc] = cls
    return out


def classes_of(source: str | Path) -> dict[str, str]:
    """The classes ``source`` names: a bundled set's (``demo-datastore``, unless a file of that
    name exists), else a file (:func:`read_classes`)."""
    from ctxleak.bundled import with_classes

    bundled = with_classes()
    if isinstance(source, str) and source in bundled and not Path(source).exists():
        from importlib import resources

        return read_classes(Path(str(resources.files("ctxleak") / "data" / "demo"
                                     / bundled[source])))
    return read_classes(source)


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


__all__ = ["classes_of", "prompt_messages_of", "read_classes"]
