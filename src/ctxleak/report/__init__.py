"""Reporting: self-contained, escaped HTML reports (:class:`Report`), PII redaction
(:func:`redact_text`; :class:`Redactor`, the one path of ``--redact``) and PNG plots
(:mod:`ctxleak.report.plots`, imported on demand so that matplotlib is never loaded by
``import ctxleak``)."""

from __future__ import annotations

from ctxleak.report.html import REDACTED, Link, Report, format_value, redact_text, redaction_spans
from ctxleak.report.redaction import Redactor, redacting

__all__ = ["REDACTED", "Link", "Redactor", "Report", "format_value", "redact_text", "redacting",
           "redaction_spans"]
