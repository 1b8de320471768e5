"""What a run over a log says of the log itself, for the report and the console: which traces
were answers (scored) and which only called the retriever (never scored), which prompt the
answers were scored under, and how a greedy log's numbers read."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def log_notes(summary: Mapping[str, Any]) -> dict[str, str]:
    """``{label: sentence}`` from the summary's ``traces``, ``prompt_sources`` and
    ``temperature_note``, and ``decoding_note`` (the audit's temperature is not the
    deployment's; empty for a run without them)."""
    out: dict[str, str] = {}
    traces = summary.get("traces")
    if isinstance(traces, Mapping):
        out["traces"] = (f"{traces.get('answers', 0)} answers scored (traces with an LLM span); "
                         f"{traces.get('retriever_only', 0)} retriever-only traces (no LLM "
                         "span: the app calling its retriever alone) not scored")
    sources = summary.get("prompt_sources")
    if isinstance(sources, Mapping) and sources:
        out["prompt"] = "; ".join(f"{n} answers scored under {_PROMPTS.get(s, s)}"
                                  for s, n in sources.items())
    note = summary.get("temperature_note")
    if isinstance(note, str):
        out["temperature"] = note
    decoding = summary.get("decoding_note")
    if isinstance(decoding, str):
        out["decoding differs from the deployment's"] = decoding
    return out


_PROMPTS = {"app messages": "the messages the app sent (the trace's LLM span)",
            "app template": "the app's template (prompt_messages / system_prompt)",
            "ctxleak template": "ctxleak's template"}


__all__ = ["log_notes"]
