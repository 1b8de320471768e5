"""The user's own id of a measured record. One example measured under several settings (a sweep
of λ or ε) is stored once per setting, its ``id`` then ``id|setting``; what groups its records
back, per example or per document, is the id without the setting."""

from __future__ import annotations

from typing import Any


def user_id(record: dict[str, Any]) -> str:
    """The example's own id: the record id without the setting it may carry (``id|setting``)."""
    rid, setting = str(record.get("id", "")), record.get("setting")
    if setting and rid.endswith(f"|{setting}"):
        return rid[: -len(setting) - 1]
    return rid
