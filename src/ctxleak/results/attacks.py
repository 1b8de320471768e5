"""The Result classes of the black-box attacks (``ctxleak.attack_extract``,
``ctxleak.attack_membership``), in the canary audit's family (:class:`CanaryResult`)."""

from __future__ import annotations

from ctxleak.results.base import Result
from ctxleak.results.tables import DocumentTable


class ExtractResult(Result):
    """``ctxleak.attack_extract``: one record per composite prompt ("The Good and The Bad:
    Exploring Privacy Issues in Retrieval-Augmented Generation (RAG)"), its answer matched
    against every document (``matches``: longest common span in words, ROUGE-L F1, ``verbatim`` (a
    span of 20 words or more, or the whole document), ``near_verbatim`` (ROUGE-L ≥ 0.5), the
    document's values carried out); the summary counts answers and documents extracted
    (``documents_verbatim`` …) and holds ``ledger``, one row per document."""

    method = "attack-extract"
    title = "Context extraction: what an attacker copies out"
    numeric_fields = ("queries", "documents", "answers_verbatim", "answers_near_verbatim",
                      "documents_verbatim", "documents_near_verbatim",
                      "fraction_documents_verbatim", "values_carried", "verbatim_words",
                      "near_verbatim_rouge", "queries_sent", "queries_replayed")

    def ledger(self) -> DocumentTable:
        """The ledger per document, most harmful first (a :class:`DocumentTable`: its rows,
        ``.to_pandas()``)."""
        return DocumentTable(list(self.summary.get("ledger") or []))


class MembershipResult(Result):
    """``ctxleak.attack_membership``: one record per question (its attack, the document, member
    or not, the answer and its score); the summary's ``attacks`` give, per attack, the ROC, the
    AUC (the probability a random member scores above a random non-member) with its bootstrap
    interval, the TPR at FPR 1 % and 10 % with exact Clopper–Pearson intervals and ``eps``, the
    ε lower bound (nats) at 95 % with the claim and the law, as the canary audit does."""

    method = "attack-membership"
    title = "Membership inference: which documents an attacker can tell are there"
    numeric_fields = ("eps_claimed", "queries_sent", "queries_replayed",
                      "attacks.*.n_members", "attacks.*.n_non_members", "attacks.*.auc",
                      "attacks.*.auc_ci.low", "attacks.*.auc_ci.high",
                      "attacks.*.auc_ci.confidence", "attacks.*.tpr_at_fpr.*.tpr",
                      "attacks.*.tpr_at_fpr.*.fpr", "attacks.*.tpr_at_fpr.*.fpr_target",
                      "attacks.*.eps.eps_lower", "attacks.*.eps.eps_claimed",
                      "attacks.*.eps.documents_needed", "attacks.*.auc_test.p_value",
                      "attacks.*.auc_min_detectable", "attacks.*.eps.eps_max_showable",
                      "attacks.*.eps.bound_confidence", "attacks.*.eps.confidence",
                      "eps_lower", "eps_max_showable", "auc_min_detectable",
                      "joint_confidence", "attacks_compared")

    def ledger(self) -> DocumentTable:
        """The ledger per document, most harmful first (a :class:`DocumentTable`: its rows,
        ``.to_pandas()``)."""
        return DocumentTable(list(self.summary.get("ledger") or []))


__all__ = ["ExtractResult", "MembershipResult"]
