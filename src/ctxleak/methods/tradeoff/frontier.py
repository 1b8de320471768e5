"""The privacy–utility frontier of an influence sweep: which mechanism, λ or ε keeps answers
useful and documents private.

"Estimating Privacy Leakage of Augmented Contextual Knowledge in Language Models" offers two
mitigations, a lower λ (Context Influence Decoding) and bounded CID with ε per token
(App. B, Alg. 1), and reads what each costs in utility against references (§4). A sweep
(``--lambda 0,0.5,1 --bounded-eps 2,8``) measures every combination; :func:`frontier` puts its
settings side by side, one row each:

* privacy loss: the influence above the control per token (nats per token, with its 95%
  bootstrap interval), what the document itself added beyond any context; where a setting has no
  control, every row falls back to the mean influence per token, and ``privacy_note`` says so;
* the guarantee: bounded CID's mean composed ε per response (Theorem B.1 by basic composition),
  ``None`` for plain CID;
* a second privacy axis where canary audits of the settings are given (``audits``, by setting
  key: :mod:`ctxleak.methods.attacks.canary`): ``eps_lower``, the ε an attacker demonstrated at
  95 % confidence, in
  nats per response, beside the guarantee;
* utility: answer match (the normalised reference inside the normalised answer, 0/1 per
  question) where the records have it, else token F1 against the references (SQuAD's,
  :mod:`.utility`), else ROUGE-L F1, with its interval, and the paired difference to the
  λ = 1 unbounded setting of the same temperature and context size (the paired bootstrap of
  :func:`.utility.paired_difference`);
* ``pareto``: no other setting is at least as good on both (privacy loss no higher, utility no
  lower) and better on one.

A sweep may hold other mechanisms than CID (``--mechanism``: a DP vote over shards, DP-RAG,
scrubbing; :mod:`ctxleak.methods.influence.mechanism_mode`), each measured by the same influence
and the same utility. Every row then shows what its setting claims (``eps_guarantee`` per
response, ``delta``, the ``relation`` the claim covers, ``tokens_paid``) beside the leak
measured, and exact match, token F1 and ROUGE-L each with its paired difference to the
baseline.

Fact groups: where every setting's questions come in both groups of ``record["fact"]``,
"common" (a fact the model may know without the document) and "private" (only the document
holds it), utility is read on the common-fact questions only and privacy loss on the
private-fact questions only (the summary's ``fact_groups``,
:func:`ctxleak.methods.influence.summary.fact_groups`, else the records'), and ``fact_note``
says so in one line; without both groups nothing changes.

The recommendation is the Pareto setting with the least privacy loss that keeps at least
``keep`` (default 90 %) of the best utility, said in one sentence with what its claim covers
(a shard-level ε is not a document-level ε); when no setting with less privacy loss than the
best one does, it says so and names the setting that comes closest (the most utility among
those that leak less) with its share of the best utility and how much less it leaks. With
fewer than :data:`MIN_QUESTIONS` questions the utility differences are not resolved, and it
recommends nothing (naming the setting the rule would pick on those few questions).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ctxleak.errors import ConfigError
from ctxleak.methods.tradeoff.facts import FACTS, fact_groups
from ctxleak.methods.tradeoff.utility import paired_difference

#: The share of the best utility a recommended setting keeps, by default.
KEEP = 0.9

#: The utility a frontier reads, first found first: key, name. Answer match (the normalised
#: reference inside the normalised answer, :func:`.utility.reference_scores`) where the records
#: have it, else F1, else ROUGE-L.
UTILITIES = (("match", "answer match"), ("f1", "F1"), ("rouge_l", "ROUGE-L"))

#: Every utility a row shows, each with its paired difference to the baseline: key, name.
ALL_UTILITIES = (("match", "answer match"), ("exact_match", "exact match"), ("f1", "F1"),
                 ("rouge_l", "ROUGE-L"))

#: Fewer questions than this and utility differences are not resolved: no recommendation.
MIN_QUESTIONS = 30

#: The columns of a frontier row, in order.
COLUMNS = ("setting", "label", "mechanism", "lambda", "temperature", "bounded_eps", "privacy",
           "privacy_ci_low", "privacy_ci_high", "eps_guarantee", "delta", "relation",
           "tokens_paid", "eps_lower", "utility", "utility_ci_low",
           "utility_ci_high", "baseline", "added_baseline", "utility_difference", "difference_ci_low",
           "difference_ci_high", "difference_pairs", "difference_reason", "pareto",
           "utility_kept",
           *(f"{k}{part}" for k, _ in ALL_UTILITIES
             for part in ("", "_ci_low", "_ci_high", "_difference", "_difference_ci_low",
                          "_difference_ci_high")))

ABOVE_CONTROL = "influence above control per token"
PER_TOKEN = "influence per token"


def frontier(settings: Sequence[dict[str, Any]],
             records: Sequence[dict[str, Any]] | None = None, *, keep: float = KEEP,
             seed: int = 0, audits: Mapping[str, float | None] | None = None,
             min_questions: int = MIN_QUESTIONS) -> dict[str, Any]:
    """The frontier of an influence run's ``settings`` (``summary["settings"]``); ``records``
    (the run's samples) give the paired utility differences to λ = 1, left ``None`` without;
    ``audits``: the canary audits' ε lower bounds by setting key (``eps_lower``, None where a
    setting has none); a key that is none of the settings' is refused, naming it.

    Returns ``rows`` (one per setting, in the sweep's order), the ``privacy`` and ``utility``
    they read (with ``privacy_note`` where the control is missing), ``keep``, ``questions``
    (the fewest any setting measured utility on), the ``recommended`` setting's key (``None``
    where none is, and with fewer than ``min_questions`` questions) and the
    ``recommendation``; ``facts`` (questions per fact group, ``None`` without both groups) and
    ``fact_note``, the line that says which questions utility and privacy loss were read on."""
    if not (isinstance(keep, (int, float)) and not isinstance(keep, bool) and 0 < keep <= 1):
        raise ConfigError(f"keep must be a share of the best utility in (0, 1], got {keep!r}",
                          param="keep")
    keys = [s.get("setting") for s in settings]
    unknown = [k for k in audits or {} if k not in map(str, keys)]
    if unknown:
        raise ConfigError(f"the audit of setting {unknown[0]} matches none of the sweep's "
                          f"settings ({'; '.join(map(str, keys))})", param="audits")
    by_setting: dict[Any, list[dict[str, Any]]] = {}
    for r in records or ():
        by_setting.setdefault(r.get("setting"), []).append(r)
    settings, facts = fact_views(settings, by_setting, seed)
    if facts is not None:  # utility's paired differences on the common-fact questions only
        by_setting = {k: [r for r in v if r.get("fact") == "common"]
                      for k, v in by_setting.items()}
    privacy, note = _privacy_measure(settings)
    key, name = next(((k, n) for k, n in UTILITIES
                      if any((s.get(k) or {}).get("mean") is not None for s in settings)),
                     (None, None))
    labels = setting_labels(settings)
    rows = []
    for s, label in zip(settings, labels):
        stats = (((s.get("control") or {}).get("above_control_per_token") or {})
                 if privacy == ABOVE_CONTROL else (s.get("influence_per_token") or {}))
        util = (s.get(key) or {}) if key else {}
        row: dict[str, Any] = {
            "setting": s.get("setting"), "label": label, "mechanism": s.get("mechanism"),
            "lambda": s.get("lambda"), "temperature": s.get("temperature"),
            "bounded_eps": s.get("bounded_eps"),
            "privacy": stats.get("mean"), "privacy_ci_low": stats.get("ci_low"),
            "privacy_ci_high": stats.get("ci_high"), **claim_columns(s),
            "eps_lower": (audits or {}).get(str(s.get("setting"))),
            "utility": util.get("mean"), "utility_ci_low": util.get("ci_low"),
            "utility_ci_high": util.get("ci_high")}
        base = baseline_key(s)
        row["baseline"] = s.get("setting") == base
        row["added_baseline"] = bool(s.get("added_baseline"))
        mine, theirs = by_setting.get(s.get("setting"), []), \
            by_setting.get(base, []) if base in keys else []
        row.update(_difference(mine, theirs, key, row["baseline"], seed))
        row.update(utility_columns(s, mine, theirs, row["baseline"], seed))
        rows.append(row)
    mark_pareto(rows)
    best = _best(rows)
    for row in rows:
        row["utility_kept"] = (row["utility"] / best["utility"]
                               if best and row["utility"] is not None and best["utility"] > 0
                               else None)
    questions = min((int(s["n"]) for s in settings if s.get("n") is not None), default=None)
    resolved = questions is None or questions >= min_questions
    chosen = recommend(rows, keep) if resolved else None
    sentence = recommendation(rows, chosen, keep, privacy, name) if resolved else (
        f"No recommendation: utility differences not resolved with {questions} question(s) "
        f"(fewer than {min_questions}); measure at least {min_questions} questions to choose "
        f"between settings." + _indicative(rows, keep, name))
    return {"privacy": privacy, "privacy_unit": "nats per token", "privacy_note": note,
            "utility": name, "utility_key": key, "keep": keep, "questions": questions,
            "min_questions": min_questions, "resolved": resolved,
            "facts": facts, "fact_note": fact_note(facts),
            "recommended": chosen["setting"] if chosen else None,
            "recommendation": sentence, "rows": rows}


def fact_views(settings: Sequence[dict[str, Any]], by_setting: Mapping[Any, Sequence[dict[str,
               Any]]], seed: int = 0) -> tuple[list[dict[str, Any]], dict[str, int] | None]:
    """The settings as the frontier reads them, and the questions per fact group. Where every
    setting has both fact groups (its summary's ``fact_groups``, else computed from its
    records in ``by_setting``), each is read with its utilities (and ``n``) from the
    "common" group and its influence per token and above the control from the "private"
    group; otherwise the settings as they are and ``None``."""
    groups = [s.get("fact_groups") or (fact_groups(by_setting.get(s.get("setting")) or (),
                                                   seed=seed) if by_setting else None)
              for s in settings]
    if not settings or not all(g and all((g.get(f) or {}).get("n") for f in FACTS)
                               for g in groups):
        return list(settings), None
    views = []
    for s, g in zip(settings, groups):
        assert g is not None  # checked above
        common, private = g["common"], g["private"]
        views.append({**s, "n": common["n"], **{k: common.get(k) for k, _ in ALL_UTILITIES},
                      "influence_per_token": private.get("influence_per_token"),
                      "control": {**(s.get("control") or {}), "above_control_per_token":
                                  private.get("above_control_per_token")}})
    counts = {f: min(int(g[f]["n"]) for g in groups if g) for f in FACTS}
    return views, counts


def fact_note(facts: Mapping[str, int] | None) -> str | None:
    """The line that says what a fact-split frontier read where: ``utility on the 24
    common-fact questions, leak on the 64 private-fact questions``; None without a split."""
    if not facts:
        return None
    return (f"utility on the {facts['common']} common-fact questions, leak on the "
            f"{facts['private']} private-fact questions")


def claim_columns(setting: dict[str, Any]) -> dict[str, Any]:
    """What a setting claims: ε per response (the mean over its answers; bounded CID's
    composed ε in a run from before claims were recorded), δ, the relation the claim covers
    (:data:`~ctxleak.mitigations.mechanisms.RELATIONS`) and the tokens paid per response."""
    claim = setting.get("claim") or {}
    if claim:
        eps = (claim.get("eps") or {}).get("mean") if claim.get("relation") != "none" else None
        return {"eps_guarantee": eps, "delta": claim.get("delta"),
                "relation": claim.get("relation"),
                "tokens_paid": (setting.get("tokens_paid") or {}).get("mean")}
    bounded = setting.get("bounded_eps") is not None
    return {"eps_guarantee": (setting.get("composed_eps") or {}).get("mean") if bounded
            else None, "delta": 0.0 if bounded else None,
            "relation": "context" if bounded else None, "tokens_paid": None}


def utility_columns(setting: dict[str, Any], mine: Sequence[dict[str, Any]],
                    base: Sequence[dict[str, Any]], is_base: bool,
                    seed: int) -> dict[str, Any]:
    """Exact match, token F1 and ROUGE-L of a setting, each with its interval and its paired
    difference to the baseline with that interval (None where not measured)."""
    out: dict[str, Any] = {}
    for k, _ in ALL_UTILITIES:
        stats = setting.get(k) or {}
        diff = _difference(mine, base, k if stats else None, is_base, seed)
        out.update({k: stats.get("mean"), f"{k}_ci_low": stats.get("ci_low"),
                    f"{k}_ci_high": stats.get("ci_high"),
                    f"{k}_difference": diff["utility_difference"],
                    f"{k}_difference_ci_low": diff["difference_ci_low"],
                    f"{k}_difference_ci_high": diff["difference_ci_high"]})
    return out


def _privacy_measure(settings: Sequence[dict[str, Any]]) -> tuple[str, str | None]:
    """Influence above the control per token where every setting has one, else the mean
    influence per token, with the note why."""
    missing = [s for s in settings
               if (((s.get("control") or {}).get("above_control_per_token") or {})
                   .get("mean")) is None]
    if not missing:
        return ABOVE_CONTROL, None
    reason = (missing[0].get("control") or {}).get("reason") or "no example had a control"
    return PER_TOKEN, (f"privacy is the mean influence per token, not the influence above a "
                       f"control: {len(missing)} of {len(settings)} setting(s) have no control "
                       f"({reason})")


def setting_labels(settings: Sequence[dict[str, Any]]) -> list[str]:
    """Each setting by what varies across the sweep: ``λ = 0.5``, ``λ = 1, ε = 2``, with T and
    the context size where they vary too; ``λ = 1 (added baseline)`` where the sweep did not ask
    for the unmitigated setting and it was measured as the baseline."""
    temps = {s.get("temperature") for s in settings}
    contexts = {context_part(s.get("setting")) for s in settings}
    out = []
    for s in settings:
        if s.get("mechanism"):
            extra = [f"T = {s.get('temperature'):g}"] if len(temps) > 1 else []
            out.append(", ".join([str(s["mechanism"]), *extra]))
            continue
        parts = [f"λ = {s.get('lambda'):g}" if s.get("lambda") is not None else "λ = ?"]
        if s.get("bounded_eps") is not None:
            parts.append(f"ε = {s['bounded_eps']:g}")
        if len(temps) > 1:
            parts.append(f"T = {s.get('temperature'):g}")
        if len(contexts) > 1:
            parts.append(context_part(s.get("setting")).replace("=", " = "))
        out.append(", ".join(parts) + (" (added baseline)" if s.get("added_baseline") else ""))
    return out


def context_part(key: Any) -> str:
    """The ``context=...`` part of a setting's key (:attr:`.setting.Setting.key`)."""
    return next((p for p in str(key).split(",") if p.startswith("context=")), "context=all")


def baseline_key(setting: dict[str, Any]) -> str | None:
    """The key of the setting a row's utility is compared with: plain decoding, λ = 1 without
    a bound, at the same temperature and context size."""
    temperature = setting.get("temperature")
    if temperature is None:
        return None
    return f"lambda=1,T={temperature:g},{context_part(setting.get('setting'))}"


def _difference(rows: Sequence[dict[str, Any]], base: Sequence[dict[str, Any]],
                key: str | None, is_base: bool, seed: int) -> dict[str, Any]:
    """The row's utility difference to its baseline with a paired bootstrap interval; ``None``
    with the reason where it has none."""
    out: dict[str, Any] = {"utility_difference": None, "difference_ci_low": None,
                           "difference_ci_high": None, "difference_pairs": 0,
                           "difference_reason": None}
    if key is None:
        out["difference_reason"] = "no utility: no example has a reference"
    elif is_base:
        out["difference_reason"] = "the baseline (λ = 1, no bound)"
    elif not base:
        out["difference_reason"] = "no λ = 1 setting without a bound to compare with"
    elif not rows:
        out["difference_reason"] = "no records to pair"
    else:
        d = paired_difference(rows, base, key, seed=seed)
        out.update({"utility_difference": d["mean_difference"], "difference_ci_low": d["ci_low"],
                    "difference_ci_high": d["ci_high"], "difference_pairs": d["pairs"],
                    "difference_reason": d["ci_reason"]})
    return out


def _scored(row: dict[str, Any]) -> bool:
    return row["privacy"] is not None and row["utility"] is not None


def mark_pareto(rows: list[dict[str, Any]]) -> None:
    """``pareto`` on each row: True when no other row has privacy loss no higher and utility no
    lower, one of them strictly; None where the row lacks either figure."""
    for row in rows:
        if not _scored(row):
            row["pareto"] = None
            continue
        p, u = row["privacy"], row["utility"]
        row["pareto"] = not any(
            _scored(o) and o is not row and o["privacy"] <= p and o["utility"] >= u
            and (o["privacy"] < p or o["utility"] > u) for o in rows)


def _best(rows: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The row with the best utility (of those tied, the least privacy loss)."""
    scored = [r for r in rows if _scored(r)]
    return min(scored, key=lambda r: (-r["utility"], r["privacy"])) if scored else None


def recommend(rows: Sequence[dict[str, Any]], keep: float = KEEP) -> dict[str, Any] | None:
    """The Pareto row with the least privacy loss whose utility is at least ``keep`` times the
    best; None without utility, or where the best utility is 0."""
    best = _best(rows)
    if best is None or best["utility"] <= 0:
        return None
    fit = [r for r in rows if r.get("pareto") and r["utility"] >= keep * best["utility"]]
    return min(fit, key=lambda r: r["privacy"]) if fit else None


def _pct(x: float) -> str:
    return f"{100 * x:.0f} %"


def recommendation(rows: Sequence[dict[str, Any]], chosen: dict[str, Any] | None, keep: float,
                   privacy: str, utility: str | None) -> str:
    """One sentence: the recommended setting, what share of the best utility it keeps at what
    share of the best setting's privacy loss, or why there is none."""
    best = _best(rows)
    if utility is None or best is None:
        return ("No recommendation: no example has a reference answer, so utility cannot be "
                "measured (give a reference field, or try data='demo-qa').")
    if chosen is None:
        return (f"No recommendation: every setting's {utility} is 0 (no answer matches a "
                f"reference), so there is no utility to keep.")
    unit = "nats per token"
    head = (f"{best['label']}: {utility} {best['utility']:.3g}, {privacy} "
            f"{best['privacy']:.3g} {unit}")
    if chosen is best:
        near = closest(rows)
        return (f"No setting with less {privacy} keeps {_pct(keep)} of the best {utility} "
                f"({head})." + (f" Closest: {_kept_text(near, best, utility)}." if near else ""))
    if best["privacy"] > 0 and chosen["privacy"] >= 0:
        cost = f"{_pct(chosen['privacy'] / best['privacy'])} of its {privacy}"
    else:
        cost = f"{privacy} {chosen['privacy']:.3g} {unit}"
    sentence = (f"{chosen['label']} keeps {_pct(chosen['utility'] / best['utility'])} of the "
                f"best {utility} at {cost} ({head}")
    if chosen.get("eps_guarantee") is not None and chosen.get("relation") is None:
        sentence += f"; ε {chosen['eps_guarantee']:.3g} per response guaranteed"
    return sentence + ")." + claim_sentence(chosen)


def closest(rows: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The setting that comes closest to a recommendation where none keeps enough utility:
    of those with less privacy loss than the best-utility setting, the one with the most
    utility (of those tied, the least privacy loss); None where none leaks less."""
    best = _best(rows)
    if best is None:
        return None
    return _best([r for r in rows if _scored(r) and r["privacy"] < best["privacy"]])


def _kept_text(row: dict[str, Any], best: dict[str, Any], utility: str | None) -> str:
    """``λ = 0.5 keeps 84 % of the best F1 (F1 0.42 vs 0.50) with 0.12 nats per token less
    leak``: a setting against the best-utility one."""
    kept = _pct(row["utility"] / best["utility"]) if best["utility"] > 0 else "—"
    return (f"{row['label']} keeps {kept} of the best {utility} ({utility} "
            f"{row['utility']:.2f} vs {best['utility']:.2f}) with "
            f"{best['privacy'] - row['privacy']:.2g} nats per token less leak")


def _indicative(rows: Sequence[dict[str, Any]], keep: float, utility: str | None) -> str:
    """What the rule would pick on too few questions to resolve it, said as indicative
    only: the setting it picks where that leaks less than the best-utility one, else the
    closest (:func:`closest`); empty where neither is."""
    best = _best(rows)
    if best is None or utility is None or best["utility"] <= 0:
        return ""
    pick = recommend(rows, keep)
    near = pick if pick is not None and pick is not best else closest(rows)
    return (f" Indicative only, on these questions: {_kept_text(near, best, utility)}."
            if near else "")


#: What a claim under each relation covers, and what it does not, in a few words.
CLAIM_SCOPE = {
    "document": "per document: adding or removing any one document; a person whose data "
                "sits in k documents is covered at k times ε",
    "shard": "per shard: a shard-level ε is not a document-level ε, unless each document "
             "sits in exactly one shard",
    "context": "for the whole retrieved context replaced by any other",
    "none": "no guarantee: the measured leak is all that is known",
}


def claim_sentence(row: dict[str, Any]) -> str:
    """What the recommended row claims and what the claim covers, with the ε an attack
    demonstrated beside it where one was given; empty for a row of a run from before claims
    were recorded."""
    relation = row.get("relation")
    if relation is None:
        return ""
    if relation == "none" or row.get("eps_guarantee") is None:
        text = f" Its claim: {CLAIM_SCOPE['none']}."
    else:
        delta = f", δ = {row['delta']:.2g}" if row.get("delta") else ""
        text = (f" Its claim: ε = {row['eps_guarantee']:.3g}{delta} per response, "
                f"{CLAIM_SCOPE.get(relation, relation)}.")
    if row.get("eps_lower") is not None:
        text += f" A canary attack demonstrated ε ≥ {row['eps_lower']:.3g} (95 %)."
    return text


__all__ = ["ABOVE_CONTROL", "ALL_UTILITIES", "CLAIM_SCOPE", "COLUMNS", "KEEP", "MIN_QUESTIONS",
           "PER_TOKEN", "UTILITIES", "baseline_key", "claim_columns", "claim_sentence",
           "closest", "context_part", "fact_note", "fact_views", "frontier", "mark_pareto",
           "recommend", "recommendation", "setting_labels", "utility_columns"]
