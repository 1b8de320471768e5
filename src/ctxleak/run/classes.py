"""The operator's class of each document (``public``, ``internal``, ``restricted``, ...), read
from a JSONL or CSV file of rows with ``id`` and ``class``: the file ``ctxleak serve --classes``
takes, as do ``ctxleak influence``, the attacks and the findings sheet, so that a frontier
measures documents as the privacy proxy serves them. A document of class :data:`PUBLIC` is no
secret of anyone's: it stays in the prompt at full strength and no mechanism bounds or charges
it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ctxleak.errors import ConfigError, InputError
from ctxleak.mitigations.ledger import PUBLIC  # the class never bounded or charged
from ctxleak.mitigations.prompts import PromptOf
from ctxleak.run.records import iter_rows


def read_classes(path: str | Path) -> dict[str, str]:
    """The operator's class of each document: a JSONL or CSV file of rows with ``id`` and
    ``class`` (``ctxleak serve --classes FILE``). An id given twice with two classes, a missing
    or empty field, is an error naming the file, line and field."""
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


def resolve_classes(value: Any, param: str = "classes") -> dict[str, str] | None:
    """``value`` as a mapping of document id to class: None (no classes), a mapping (its keys
    and values as strings), or a bundled set's name or a file (:func:`classes_of`); anything
    else is a :class:`ConfigError` naming ``param``."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        if not all(isinstance(v, str) and v for v in value.values()):
            raise ConfigError(f"{param}: each document's class must be a non-empty string",
                              param=param)
        return {str(k): str(v) for k, v in value.items()}
    if isinstance(value, (str, Path)):
        if not Path(value).exists() and value not in _bundled():
            raise ConfigError(f"{param}: no file {str(value)!r} (and no bundled set of that "
                              f"name: {', '.join(_bundled()) or 'none'})", param=param)
        return classes_of(value)
    raise ConfigError(f"{param}: {value!r} is not a file of id and class rows, a bundled "
                      "set's name or a mapping", param=param)


def with_public(prompt: PromptOf, public: Sequence[str]) -> PromptOf:
    """``prompt`` with the ``public`` texts before the texts it is given (``[]``: the public
    texts alone); ``prompt`` itself where there are none."""
    if not public:
        return prompt
    head = tuple(public)

    def wrapped(texts: Sequence[str]) -> list[int]:
        return prompt(head + tuple(texts))

    return wrapped


def _bundled() -> dict[str, str]:
    from ctxleak.bundled import with_classes

    return dict(with_classes())


__all__ = ["PUBLIC", "classes_of", "read_classes", "resolve_classes", "with_public"]
