"""PII probing (ProPILE: Probing Privacy Leakage in Large Language Models): records, extraction from
text, synthetic data, black-box prompt templates and model-free metrics. The model-facing probes
build on these."""

from __future__ import annotations

from ctxleak.methods.pii.extract import extract, extract_records
from ctxleak.methods.pii.metrics import (
    WilcoxonResult,
    edit_distance_within,
    email_local_part_match,
    exact_match,
    likelihood_from_token_logprobs,
    phone_first_digits_match,
    phone_location_code_match,
    wilcoxon_compare,
)
from ctxleak.methods.pii.records import PIIRecord, load_records, save_records
from ctxleak.methods.pii.synth import synth_records
from ctxleak.methods.pii.templates import MAX_NEW_TOKENS, build_prompts
from ctxleak.sensitive.detect import Span, find_pii

__all__ = [
    "MAX_NEW_TOKENS",
    "PIIRecord",
    "Span",
    "WilcoxonResult",
    "build_prompts",
    "edit_distance_within",
    "email_local_part_match",
    "exact_match",
    "extract",
    "extract_records",
    "find_pii",
    "likelihood_from_token_logprobs",
    "load_records",
    "phone_first_digits_match",
    "phone_location_code_match",
    "save_records",
    "synth_records",
    "wilcoxon_compare",
]
