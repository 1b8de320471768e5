"""ICLInf: the privacy loss of in-context exemplars (Evaluating Privacy Leakage From In-Context
Learning §3-4, App. B, E.1)."""

from ctxleak.methods.icl.calibration import (
    DEFAULT_CALIBRATION_EPS,
    calibrate_sets,
    content_free_logp,
    contextual_calibrate,
)
from ctxleak.methods.icl.data import ICLTask, LabeledExample, load_task, parse_labels
from ctxleak.methods.icl.loss import (
    ICLInfSummary,
    position_losses,
    query_iclinf,
    renormalise,
    summarize_iclinf,
)
from ctxleak.methods.icl.pipeline import (
    ICLConfig,
    LabelScorer,
    QueryScores,
    draw_exemplars,
    measure_query,
    query_id,
    query_record,
    run_iclinf,
    score_prompts,
    select_queries,
    summarize_records,
    variant_key,
)
from ctxleak.methods.icl.prompts import (
    CONTENT_FREE,
    FORMATS,
    PromptBuilder,
    PromptFormat,
    QueryPrompts,
    get_format,
    query_prompts,
)

__all__ = [
    "CONTENT_FREE",
    "DEFAULT_CALIBRATION_EPS",
    "FORMATS",
    "ICLConfig",
    "ICLInfSummary",
    "ICLTask",
    "LabelScorer",
    "LabeledExample",
    "PromptBuilder",
    "PromptFormat",
    "QueryPrompts",
    "QueryScores",
    "contextual_calibrate",
    "calibrate_sets",
    "content_free_logp",
    "draw_exemplars",
    "get_format",
    "load_task",
    "measure_query",
    "parse_labels",
    "position_losses",
    "query_iclinf",
    "query_id",
    "query_prompts",
    "query_record",
    "renormalise",
    "run_iclinf",
    "score_prompts",
    "select_queries",
    "summarize_iclinf",
    "summarize_records",
    "variant_key",
]
