"""Run folders safe to forward: what a run writes (``samples.jsonl``, ``results.json``,
``report.html``, the method's other files) holds no secret of the run's texts unless the user
asked to keep them (``keep_texts=True``, ``--keep-texts``).

A :class:`Scrubber` sees every record before it is written (the run folder calls
:meth:`Scrubber.record`): it finds the sensitive values in the record's texts (documents,
passages, questions, answers; :func:`ctxleak.report.redaction.run_values`, the detectors of
:mod:`ctxleak.sensitive`) and masks them, as ``[REDACTED]``, in every text of the record, and
of everything written after it (the summary, the page: :meth:`Scrubber.value`), wherever they
appear and whatever the whitespace they are written with. By default the values masked are
credentials and direct identifiers (:data:`FORWARD_TYPES`: passwords, keys and tokens, PINs and
door codes, ids such as IBANs, e-mail addresses, phone numbers); under ``redact=True``
(``--redact``) every type the Redactor masks, person names included. Ids and keys of rows
(:data:`KEPT_KEYS`) are kept: they name the rows a resume and ``results.json`` count.

Only the values are masked, never ctxleak's own words around them: the detectors take "Def."
or "≥" for a person, but a value is masked only where it was found in the run's own texts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ctxleak.report.redaction import Redactor, run_values

#: The types masked in a run folder by default: credentials and direct identifiers.
FORWARD_TYPES = frozenset({"password", "secret", "pin", "id", "email", "phone"})
#: Keys whose values are names of rows or documents, never masked (a resume and
#: ``results.json``'s ``sample_ids`` find rows by them).
KEPT_KEYS = frozenset({"id", "key", "passage_ids", "document_ids", "sample_ids", "command",
                       "model", "output", "served_model", "server_url", "tokenizer"})


class Scrubber:
    """Masks the run's sensitive values in what a run folder is given to write (module
    docstring); the values found so far are kept, so the summary and the page written after
    the records are masked with all of them."""

    def __init__(self, redact: bool = False) -> None:
        self.redact = redact
        self.redactor = Redactor(True, detect=False)

    def found(self, *values: Any) -> None:
        """Add the sensitive values of ``values``' texts to those masked."""
        kept = {v: kind for v, kind in run_values(*(_unkept(v) for v in values)).items()
                if self.redact or kind in FORWARD_TYPES}
        if kept:
            self.redactor = self.redactor.adding_found(kept) if self.redact \
                else self.redactor.adding((), kept)

    def record(self, row: dict[str, Any]) -> dict[str, Any]:
        """``row`` with the values of its own texts (and those found before) masked."""
        self.found(row)
        out = self.value(row)
        return out if isinstance(out, dict) else row

    def value(self, value: Any, key: str = "") -> Any:
        """``value`` (a string, a list, a mapping, nested) with the values found so far masked
        in every string; token lists (keys ending in ``token_strings``) on their joined text;
        :data:`KEPT_KEYS` as they are."""
        if not self.redactor.values and not self.redactor.names:
            return value
        if key in KEPT_KEYS:
            return value
        if isinstance(value, str):
            return self.redactor.text(value)
        if isinstance(value, Mapping):
            return {k: self.value(v, str(k)) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            if key.endswith("token_strings") and all(isinstance(v, str) for v in value):
                return self.redactor.tokens(value)
            return [self.value(v, key) for v in value]
        return value


def _unkept(value: Any) -> Any:
    """``value`` without its :data:`KEPT_KEYS` (an id is not searched for values)."""
    if isinstance(value, Mapping):
        return {k: _unkept(v) for k, v in value.items() if k not in KEPT_KEYS}
    return value


def scrubber_for(config: Mapping[str, Any]) -> Scrubber | None:
    """The Scrubber of a run with this ``config``: None when it keeps its texts
    (``keep_texts``), else one masking :data:`FORWARD_TYPES` (every type under ``redact``)."""
    if config.get("keep_texts"):
        return None
    return Scrubber(bool(config.get("redact", False)))


#: What the run folder is given: the Scrubber of a run's config.
ScrubberFor = Callable[[Mapping[str, Any]], "Scrubber | None"]

__all__ = ["FORWARD_TYPES", "KEPT_KEYS", "Scrubber", "ScrubberFor", "scrubber_for"]
