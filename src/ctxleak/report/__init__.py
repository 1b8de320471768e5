"""Reporting: self-contained, escaped HTML reports (:class:`Report`), PII redaction
(:func:`redact_text`) and PNG plots (:mod:`ctxleak.report.plots`, imported on demand so that
matplotlib is never loaded by ``import ctxleak``)."""

from __future__ import annotations

from ctxleak.report.html import REDACTED, Link, Report, format_value, redact_text, redaction_spans

__all__ = ["REDACTED", "Link", "Report", "format_value", "redact_text", "redaction_spans"]
