"""The datastore ``ctxleak serve`` answers over (``--datastore``), read by
:mod:`ctxleak.run.datastore_file` (one line naming the file, line and field for any bad row);
the operator's document classes are read by :mod:`ctxleak.run.classes`."""

from __future__ import annotations

from typing import Any

from ctxleak.errors import ConfigError
from ctxleak.mitigations.datastore import Datastore
from ctxleak.run.datastore_file import load_datastore


def datastore_option(source: Any, mechanism: Any) -> Datastore:
    """``--datastore``'s value as a :class:`Datastore` (a file, or a bundled set's name), with
    a mechanism to answer over it."""
    store = load_datastore(source)
    if mechanism is None:
        raise ConfigError("a datastore is answered over by a mechanism: give one too "
                          "(--mechanism, e.g. dp-rag:eps=5)", param="datastore")
    return store


__all__ = ["datastore_option"]
