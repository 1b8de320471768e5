"""Auditing DP synthetic-text generation (Evaluating Privacy Leakage From In-Context Learning §5, App. C).

Algorithm 1 (clip, average and sample over s one-shot prompts) runs on the engine's multi-stream
generation at the parameters Algorithm 3 calibrates for each target ε; the data-dependent RDP of
every released token is computed from the clipped rows already in hand and turned into
``ε_empirical``. The accounting maths lives in :mod:`ctxleak.mitigations.accounting`, the mechanism
maths in :mod:`ctxleak.mitigations.dp_synthetic`.
"""

from ctxleak.methods.audit.data import (
    ALL_LABELS,
    DEFAULT_LABEL,
    TEMPLATE,
    PrivateExample,
    check_template,
    load_private_data,
    one_shot_prompt,
    subset_prompts,
)
from ctxleak.methods.audit.mechanism import (
    DPAggregator,
    PrivateGeneration,
    draw_subset,
    generate_private,
    leave_one_out_rdp,
    sequence_seeds,
)
from ctxleak.methods.audit.pipeline import (
    AuditConfig,
    AuditJob,
    AuditSetting,
    audit_jobs,
    audit_sequence,
    plan_audit,
    setting_row,
    setting_rows,
)

__all__ = [
    "ALL_LABELS",
    "DEFAULT_LABEL",
    "TEMPLATE",
    "AuditConfig",
    "AuditJob",
    "AuditSetting",
    "DPAggregator",
    "PrivateExample",
    "PrivateGeneration",
    "audit_jobs",
    "audit_sequence",
    "check_template",
    "draw_subset",
    "generate_private",
    "leave_one_out_rdp",
    "load_private_data",
    "one_shot_prompt",
    "plan_audit",
    "sequence_seeds",
    "subset_prompts",
    "setting_row",
    "setting_rows",
]
