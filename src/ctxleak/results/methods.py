"""The Result classes of the other methods (ICLInf, the audit, susceptibility, the PII probe,
the n-gram explanation), and :func:`result_class`: a method's command name -> its class."""

from __future__ import annotations

from ctxleak.methods.attacks.checks import CHECKS as CANARY_CHECKS
from ctxleak.methods.audit.checks import CHECKS as AUDIT_CHECKS
from ctxleak.methods.icl.checks import CHECKS as ICL_CHECKS
from ctxleak.methods.pii.checks import CHECKS as PROBE_CHECKS
from ctxleak.methods.susceptibility.checks import CHECKS as SUSCEPTIBILITY_CHECKS
from ctxleak.results.attacks import ExtractResult, MembershipResult
from ctxleak.results.base import Result
from ctxleak.results.findings import Findings
from ctxleak.results.influence import InfluenceResult


class ICLInfResult(Result):
    """``ctxleak.iclinf``: one record per (shots, query); ICLInf mean ± std (Eq. 4 of "Evaluating
    Privacy Leakage From In-Context Learning"), in nats: an ex-post per-instance ε, the output up to
    e^x times more likely with an exemplar than without it; ``summary["by_exemplar"]`` and
    ``["by_position"]`` rank the exemplars and positions by their loss (nats)."""

    method = "icl"
    title = "ICLInf (Eq. 4)"
    checks = ICL_CHECKS
    numeric_fields = ("iclinf.*.*.n", "iclinf.*.*.iclinf_mean", "iclinf.*.*.iclinf_std",
                      "iclinf.*.*.accuracy", "iclinf.*.*.mean_loss_by_position.*",
                      "by_exemplar.*.max_loss", "by_exemplar.*.mean_loss",
                      "by_exemplar.*.queries", "by_position.*.mean_loss")


class AuditResult(Result):
    """``ctxleak.audit``: one record per synthetic sequence; ε_empirical against the target
    (Tables 4-6 of "Evaluating Privacy Leakage From In-Context Learning")."""

    method = "audit"
    title = "Privacy audit of DP synthetic text"
    checks = AUDIT_CHECKS
    numeric_fields = tuple(f"rows.*.{k}" for k in (
        "delta", "target_eps", "temperature", "clip", "subset_size", "alpha", "eps_theoretical",
        "eps_empirical", "ratio", "sequences", "n_gen", "tokens", "tokens_over_paper_bound",
        "eps_empirical_zero_loss"))


class SusceptibilityResult(Result):
    """``ctxleak.susceptibility``: one record per query, χ_MC and χ_F ("Efficiently Computing
    Susceptibility to Context in Language Models"). χ_MC is a mutual information in nats, at most
    its ceiling min(H(A|q), H(C)) (``summary["ceiling"]``); χ_F is on another scale and only ranks
    queries."""

    method = "susceptibility"
    title = "Susceptibility to context"
    checks = SUSCEPTIBILITY_CHECKS
    numeric_fields = ("n_queries", "metrics.*.mean", "means.*.*.*.mean", "ceiling.ceilings.*",
                      "ceiling.shares.*", "ceiling.mean_ceiling", "ceiling.mean_share",
                      "top_queries.*.chi_mc", "top_queries.*.chi_f", "top_queries.*.ceiling")


class ProbeResult(Result):
    """``ctxleak.probe``: one record per probe prompt; per-group exact match, likelihoods (nats) and
    Wilcoxon tests (ProPILE: Probing Privacy Leakage in Large Language Models);
    ``summary["significance"]`` says, per group, whether its n lets the test reject at α, and the
    run folder's ``hits.jsonl`` lists every exact PII string generated."""

    method = "probe"
    title = "PII probing (ProPILE)"
    checks = PROBE_CHECKS
    numeric_fields = tuple(f"groups.*.{k}" for k in (
        "n_units", "n_prompts", "exact_match_rate", "mean_target_ll", "mean_null_ll",
        "mean_target_ll_norm", "mean_null_ll_norm", "wilcoxon.pvalue", "string_metrics.*",
        "in_context.mean_influence", "in_context.mean_context_share")) + (
        "timings_s.*", "hits", "significance.alpha", "significance.groups.*.pvalue",
        "significance.groups.*.min_pvalue", "significance.groups.*.n")


class CanaryResult(Result):
    """``ctxleak.canary_audit``: one record per canary trial (its coin, both canaries, the
    response and the attacker's score); ``summary["eps_lower"]`` is the attack's empirical ε
    lower bound at ``summary["confidence"]`` (Clopper–Pearson), beside
    ``summary["eps_guarantee"]``, bounded CID's composed ε (Thm B.1 of "Estimating Privacy
    Leakage of Augmented Contextual Knowledge in Language Models"), and ``summary["law"]``."""

    method = "canary"
    title = "Canary audit: an attack's ε lower bound beside the guarantee"
    checks = CANARY_CHECKS
    numeric_fields = ("eps_lower", "eps_guarantee", "eps_guarantee_ex_ante", "confidence",
                      "tp", "n_in", "fp", "n_out", "tpr", "fpr", "tpr_ci.*", "fpr_ci.*",
                      "threshold", "n_trials", "trials_needed", "lambda", "temperature",
                      "bounded_eps")


class ExplainResult(Result):
    """``ctxleak.influence_explain``: one prompt's response, the uni-gram influence of each
    context token on its first token (Table 1) and the top n-grams."""

    method = "influence-explain"
    title = "Most influential context n-grams"



#: A method's command name (``config["command"]``) -> its Result class.
RESULT_CLASSES: dict[str, type[Result]] = {
    cls.method: cls for cls in (Result, InfluenceResult, ExplainResult, CanaryResult, ICLInfResult,
                                AuditResult,
                                SusceptibilityResult, ProbeResult, ExtractResult,
                                MembershipResult, Findings)}


def result_class(command: str) -> type[Result]:
    """The Result class of the method named ``command`` (:class:`Result` for any other)."""
    return RESULT_CLASSES.get(command, Result)
