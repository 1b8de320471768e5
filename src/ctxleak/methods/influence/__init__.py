"""Context influence, Context Influence Decoding and bounded CID (Estimating Privacy Leakage of
Augmented Contextual Knowledge in Language Models)."""

from ctxleak.methods.influence.data import (
                                           TASK_TEMPLATES,
                                           InfluenceExample,
                                           load_examples,
                                           prompt_parts,
)
from ctxleak.methods.influence.ngrams import (
                                           PromptParts,
                                           WindowInfluence,
                                           next_token_unigram_influence,
                                           window_influence,
                                           windows,
)
from ctxleak.methods.influence.pipeline import measure_example
from ctxleak.methods.influence.setting import InfluenceOptions, Setting, settings_grid
from ctxleak.methods.influence.summary import summarize_setting
from ctxleak.mitigations.cid import (
                                           CIDConfig,
                                           bounded_lambda,
                                           cid_combine,
                                           cid_logprobs,
)
from ctxleak.mitigations.ledger import LedgerEntry, RowLedger

__all__ = [
                                           "TASK_TEMPLATES",
                                           "CIDConfig",
                                           "InfluenceExample",
                                           "InfluenceOptions",
                                           "LedgerEntry",
                                           "PromptParts",
                                           "RowLedger",
                                           "Setting",
                                           "WindowInfluence",
                                           "bounded_lambda",
                                           "cid_combine",
                                           "cid_logprobs",
                                           "load_examples",
                                           "measure_example",
                                           "next_token_unigram_influence",
                                           "prompt_parts",
                                           "settings_grid",
                                           "summarize_setting",
                                           "window_influence",
                                           "windows",
]
