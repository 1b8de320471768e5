"""Another mechanism than CID as a decoding mode of the influence run.

A RAG team weighs more mitigations than a lower λ or bounded CID ("Estimating Privacy Leakage of
Augmented Contextual Knowledge in Language Models"): a differentially private vote of voters
that each read one shard ("Privacy-Preserving Retrieval-Augmented Generation with Differential
Privacy", Koga, Wu and Chaudhuri), DP-RAG's exponential mechanism after a private retrieval
("RAG with Differential Privacy", Grislain), or personal data scrubbed from the documents. Each
implements :class:`~ctxleak.mitigations.mechanisms.Mechanism`; here it decodes the answer of
each example from the example's documents (its retrieved documents, its passages, or its
context as one document), and the answer is then measured exactly as the run measures a CID
answer: scored as CID at λ = 1 (plain decoding's log-probabilities) with the whole context,
without it, without each passage, and under the control context
(:func:`~ctxleak.methods.influence.pipeline.score_drawn`). The context's influence on the
answer is thus one measure across every mechanism, beside what each mechanism claims.

Every record of the run, CID's included, carries the claim: ``claim_eps`` (ε per response,
composed over the released tokens), ``claim_delta``, ``claim_relation`` (the neighbouring
relation it covers, :data:`~ctxleak.mitigations.mechanisms.RELATIONS`) and ``tokens_paid``
(the released tokens that spent privacy budget). CID's claims: bounded CID's ε per token
composed over the response (Thm B.1, basic composition), under any replacement of the
context, since every context's next-token distribution stays within ε/2 of the no-context
one; λ = 0 never reads the context (ε = 0, bounded or not); plain CID at λ > 0 guarantees
nothing.

The prompt a mechanism is given for a set of document texts is the run's own prompt holding
those texts as a retrieved list: ctxleak's template (:func:`~ctxleak.mitigations.prompts.list_pieces`)
or the app's chat messages (``prompt_messages``, e.g. the built-in ``short-answer``, the texts
joined by a blank line as ``{context}``); for retrieved documents and passages given as a
list, the prompt with every document is the prompt the answer is scored under.

The mechanisms retrieve from the datastore, as their papers define them
(:func:`resolve_datastore`: the bundled set's own, a file, or every document the examples
retrieved, pooled): each vote's voters from their own shards, DP-RAG privately over every
document, and each claim is over the datastore's documents. With ``datastore="retrieved"`` they
read each question's own retrieved list instead, and a private retrieval thresholds the
retriever's scores where the data records them, else each document's word similarity to the
query (:func:`~ctxleak.mitigations.datastore.word_similarity`).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ctxleak.engine.lm import LanguageModel
from ctxleak.errors import ConfigError
from ctxleak.methods.influence.classes import prompt_holding
from ctxleak.methods.influence.control import ControlCost
from ctxleak.methods.influence.data import InfluenceExample
from ctxleak.methods.influence.decoys import Decoys
from ctxleak.methods.influence.metrics import mean_with_ci
from ctxleak.methods.influence.pipeline import (
    Controls,
    Job,
    example_parts,
    measure_examples,
    score_drawn,
)
from ctxleak.methods.influence.setting import InfluenceOptions, Setting
from ctxleak.mitigations.datastore import (
    BUNDLED_DATASTORES,
    Datastore,
    word_similarity,
)
from ctxleak.mitigations.document_loss import own_document_losses, within_claim
from ctxleak.mitigations.mechanisms import (
    RELATIONS,
    AnswerRequest,
    Claim,
    Decoding,
    Mechanism,
    MechanismAnswer,
)
from ctxleak.mitigations.named import PARAM, parse_mechanism
from ctxleak.mitigations.prompts import (
    LIST_SEPARATOR,
    PromptOf,
)
from ctxleak.run.classes import with_public
from ctxleak.run.datastore_file import bundled_datastore, datastore_of
from ctxleak.run.inputs import is_named

#: The ``datastore`` value that keeps each question's own retrieved list.
RETRIEVED = "retrieved"

#: The claim fields of every record, in order.
CLAIM_FIELDS = ("claim_eps", "claim_delta", "claim_relation", "tokens_paid")


def mechanism_list(value: Any) -> tuple[Mechanism, ...]:
    """``mechanisms`` as mechanism objects: one spec or object, a list of them, or specs
    joined by ``;`` (``"dp-vote:eps=2,shards=4;scrub"``); a mechanism listed twice (the same
    key) is refused."""
    if value is None:
        return ()
    if isinstance(value, str):
        items: list[Any] = [part for part in value.split(";") if part.strip()]
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        items = [value]
    out: dict[str, Mechanism] = {}
    for item in items:
        mechanism = parse_mechanism(item)
        if mechanism.swept_by:  # the run's own decoding: a setting of its sweep
            first, *more = mechanism.swept_by
            give = first + "".join(f" (and {name})" for name in more)
            raise ConfigError(f"{PARAM}: {mechanism.key()} is the run's own decoding: give "
                              f"{give} instead", param=PARAM, also=mechanism.swept_by)
        if mechanism.key() in out:
            raise ConfigError(f"{PARAM} lists {mechanism.key()} twice: each setting once",
                              param=PARAM)
        out[mechanism.key()] = mechanism
    return tuple(out.values())


def check_mechanism_options(params: Any) -> None:
    """Refuse the options a mechanism setting cannot honour: a context cut to k tokens (a
    mechanism reads whole documents)."""
    if not params.mechanisms:
        return
    if params.context_sizes is not None:
        raise ConfigError(f"{PARAM} decode from whole documents: leave out context_sizes, or "
                          f"sweep the context sizes in a run without {PARAM}", param=PARAM,
                          also=("context_sizes",))


def example_documents(example: InfluenceExample) -> tuple[str, ...]:
    """The documents a mechanism reads for ``example``: its retrieved documents' texts, its
    passages (a list's separator taken off), or its context as one document."""
    if example.documents:
        return tuple(d.text for d in example.documents)
    if example.passages:
        return tuple(p[len(LIST_SEPARATOR):] if j and p.startswith(LIST_SEPARATOR) else p
                     for j, p in enumerate(example.passages))
    return (example.context,)


def resolve_datastore(option: Any, data: Any, examples: Sequence[InfluenceExample]
                      ) -> Datastore | None:
    """The datastore the mechanisms retrieve from: ``option`` as given (a JSONL path, pairs, a
    :class:`Datastore`); None: the bundled set's own (:data:`ctxleak.bundled.BUNDLED_SETS`), else every
    retrieved document of ``examples`` with an id, pooled by id (None where there is none);
    ``"retrieved"``: None, each question's own list."""
    if isinstance(option, str) and option == RETRIEVED:
        return None
    if option is not None:
        return datastore_of(option)
    for name in BUNDLED_DATASTORES:
        if is_named(data, name):
            return bundled_datastore(name)
    pooled = [(str(d.id), d.text) for ex in examples for d in ex.documents or ()
              if d.id is not None]
    return Datastore.of(pooled) if pooled else None


def check_examples(mechanism: Mechanism, examples: Sequence[InfluenceExample],
                   datastore: Datastore | None = None) -> None:
    """Refuse, before anything is decoded, an example with a logged answer (a mechanism decodes
    its own) or, without a ``datastore``, with fewer documents than ``mechanism`` needs
    (:meth:`~ctxleak.mitigations.mechanisms.Mechanism.documents_needed`), naming the first;
    with one, a mechanism that needs more documents than it holds (a vote: one per shard)."""
    need = mechanism.documents_needed()
    if datastore is not None and need > len(datastore):
        raise ConfigError(f"{PARAM}: {mechanism.key()} has more shards than "
                          f"{datastore.describe()}: at most {len(datastore)}", param=PARAM)
    for ex in examples:
        if ex.response_source != "generated":
            raise ConfigError(f"{PARAM}: example {ex.id} carries a logged answer (its "
                              f"'response' field), which {mechanism.key()} did not decode: drop "
                              f"the response field to measure {PARAM}", param=PARAM)
        n = len(example_documents(ex))
        if datastore is None and n < need:
            raise ConfigError(f"{PARAM}: {mechanism.key()} needs at least {need} documents per "
                              f"question, and example {ex.id} has {n}: give data with a "
                              f"'documents' list (e.g. demo-qa-large), or fewer shards",
                              param=PARAM)


def mechanism_streams(mechanism: Mechanism, example: InfluenceExample,
                      datastore: Datastore | None) -> int:
    """The prompt streams one answer of ``mechanism`` keeps in flight for ``example``'s
    documents, retrieving from ``datastore`` where given
    (:meth:`~ctxleak.mitigations.mechanisms.Mechanism.streams`: a vote's voters and the
    no-retrieval stream; DP-RAG's kept documents and the prior)."""
    return mechanism.streams(len(example_documents(example)), datastore is not None)


def prompt_of(lm: LanguageModel, example: InfluenceExample, setting: Setting,
              options: InfluenceOptions) -> PromptOf:
    """The token ids of ``example``'s prompt holding the given document texts (in order; none:
    the prompt without retrieval), its public documents first where it has them
    (:mod:`.classes`): under the app's messages where the example is scored under them, else
    the run's template cut to the model's window."""
    return with_public(prompt_holding(lm, example, options.template, setting.context_tokens,
                                      options.max_new_tokens), example.public)


def answer_request(lm: LanguageModel, job: Job, options: InfluenceOptions,
                   datastore: Datastore | None = None) -> AnswerRequest:
    """The request a mechanism answers for one job: the example's documents, its prompt
    builder, the job's seed, the documents' ids where known, their retrieval scores (the
    retriever's where every document has one, else each document's word similarity to the
    query, in [0, 1], so that a private retrieval has a similarity to threshold on data that
    does not record the retriever's), and the ``datastore`` the mechanism retrieves from."""
    example, setting, seed = job
    skip = len(example.public)  # its public documents: in the prompt, not the mechanism's
    docs, texts = (example.documents or ())[skip:], example_documents(example)[skip:]
    known = [d.score for d in docs if d.score is not None]
    scores = tuple(float(x) for x in known) if docs and len(known) == len(docs) else \
        tuple(word_similarity(example.query, text) for text in texts)
    ids = tuple(str(d.id) for d in docs) if docs and all(d.id is not None for d in docs) \
        else None
    return AnswerRequest(texts, prompt_of(lm, example, setting, options),
                         seed=seed, scores=scores, ids=ids, query=example.query,
                         datastore=datastore)


def cid_slots(lm: LanguageModel, example: InfluenceExample, setting: Setting,
              options: InfluenceOptions, datastore: Datastore | None) -> int:
    """The token slots an item CID decodes keeps in flight: two streams, the prompt with the
    context and the one without, each plus the new tokens (``datastore`` unread)."""
    parts, _ = example_parts(lm, example, setting, options)
    return len(parts.full) + len(parts.empty) + 2 * options.max_new_tokens


def mechanism_slots(lm: LanguageModel, example: InfluenceExample, setting: Setting,
                    options: InfluenceOptions, datastore: Datastore | None) -> int:
    """The token slots an item another mechanism decodes keeps in flight: its streams
    (:func:`mechanism_streams`), each at most the whole prompt plus the new tokens."""
    parts, _ = example_parts(lm, example, setting, options)
    return mechanism_streams(setting.mechanism, example, datastore) * (
        len(parts.full) + options.max_new_tokens)


def measure_cid(lm: LanguageModel, jobs: Sequence[Job], options: InfluenceOptions, *,
                controls: Controls | None = None, cost: ControlCost | None = None,
                decoys: Decoys | None = None, datastore: Datastore | None = None
                ) -> list[dict[str, Any]]:
    """One record per job, in order, of jobs decoded by their setting's own CID at one bounded
    ε (every λ in one batched KV cache,
    :func:`~ctxleak.methods.influence.pipeline.measure_examples`; ``datastore`` unread), with
    the sweep's context size (None: all) and what CID spent (:func:`cid_claim`)."""
    records = measure_examples(lm, jobs, replace(options, bounded_eps=jobs[0].setting.bounded_eps),
                               controls=controls, cost=cost, decoys=decoys)
    for (_, setting, _), record in zip(jobs, records):
        record.setdefault("context_limit", setting.context_tokens)
        record.update(cid_claim(setting, record))
    return records


def measure_mechanism(lm: LanguageModel, jobs: Sequence[Job], options: InfluenceOptions, *,
                      controls: Controls | None = None, cost: ControlCost | None = None,
                      decoys: Decoys | None = None, datastore: Datastore | None = None
                      ) -> list[dict[str, Any]]:
    """One record per job, in order: the answer the jobs' one mechanism decodes (all jobs of
    one temperature in one call, each from its own seed, retrieving from ``datastore`` where
    given), measured as the run measures a CID answer at λ = 1, with the mechanism's claim,
    paid tokens and steps, and the sweep's context size (None: all); over a datastore, a DP
    mechanism's own ex-post privacy loss of each of the example's documents
    (``document_loss``, nats by document id,
    :func:`~ctxleak.mitigations.document_loss.own_document_losses`)."""
    mechanism = jobs[0].setting.mechanism
    check_examples(mechanism, [ex for ex, _, _ in jobs], datastore)
    answers: list[MechanismAnswer | None] = [None] * len(jobs)
    spent: list[dict[str, float] | None] = [None] * len(jobs)
    for temperature in sorted({setting.temperature for _, setting, _ in jobs}):
        ks = [k for k, (_, s, _) in enumerate(jobs) if s.temperature == temperature]
        decoding = Decoding(temperature=temperature, max_new_tokens=options.max_new_tokens,
                            min_new_tokens=options.min_new_tokens)
        requests = [answer_request(lm, jobs[k], options, datastore) for k in ks]
        got = mechanism.answer(lm, requests, decoding)
        if len(got) != len(ks):
            raise ConfigError(f"{PARAM}: {mechanism.key()} answered {len(got)} of {len(ks)} "
                              f"requests: a mechanism answers every request", param=PARAM)
        for k, request, answer in zip(ks, requests, got):
            answers[k] = answer
            spent[k] = own_document_losses(mechanism, lm, request, answer, decoding)
    done = [a for a in answers if a is not None]
    records = score_drawn(lm, jobs, [(list(a.response_ids), a.stopped_on_eos) for a in done],
                          options, controls, cost, decoys)
    for record, answer, losses, job in zip(records, done, spent, jobs):
        record.update(mechanism_fields(mechanism, answer))
        if losses is not None:
            record["document_loss"] = losses
        record.setdefault("context_limit", job.setting.context_tokens)
    return records


def mechanism_fields(mechanism: Mechanism, answer: MechanismAnswer) -> dict[str, Any]:
    """The fields a mechanism adds to its answer's record: its key, the claim, the paid tokens,
    the documents that reached a prompt (indices), each step's record, and whether it stopped
    on EOS."""
    return {"mechanism": mechanism.key(), **claim_fields(answer.claim, answer.tokens_paid),
            "documents_used": list(answer.documents_used),
            **({"datastore_used": list(answer.datastore_used)} if answer.datastore_used else {}),
            "mechanism_steps": [dict(step) for step in answer.steps],
            "stopped_on_eos": answer.stopped_on_eos}


def claim_fields(claim: Claim, tokens_paid: int) -> dict[str, Any]:
    """A claim and its paid tokens under the record's keys (:data:`CLAIM_FIELDS`)."""
    return {"claim_eps": claim.eps, "claim_delta": claim.delta,
            "claim_relation": claim.relation, "tokens_paid": int(tokens_paid)}


def cid_claim(setting: Setting, record: dict[str, Any]) -> dict[str, Any]:
    """The claim of an answer the setting's mechanism decoded by CID
    (:meth:`~ctxleak.mitigations.mechanisms.Mechanism.spent`) from its record: its composed ε
    and its released tokens (the stopping EOS included)."""
    released = len(record.get("response_ids") or ()) + int(bool(record.get("stopped_on_eos")))
    return claim_fields(*setting.mechanism.spent(record.get("composed_eps"), released))


def claim_summary(records: Sequence[dict[str, Any]], seed: int = 0) -> dict[str, Any]:
    """A setting's claim over its records: ``mechanism`` (its key; None for CID), ``claim``
    (ε per response: mean with its interval and the largest; δ the largest; the relation and
    what it covers) and ``tokens_paid`` (per response, mean with its interval)."""
    if not records or any("claim_relation" not in r for r in records):
        return {}
    relations = sorted({str(r["claim_relation"]) for r in records})
    eps = [float(r["claim_eps"]) for r in records if r.get("claim_eps") is not None]
    relation = relations[0] if len(relations) == 1 else "mixed"
    claim: dict[str, Any] = {
        "relation": relation,
        "covers": RELATIONS.get(relation, "the answers claim under different relations: "
                                + ", ".join(relations)),
        "eps": mean_with_ci(eps, seed=seed) if len(eps) == len(records) else None,
        "eps_max": max(eps) if len(eps) == len(records) else None,
        "delta": max(float(r.get("claim_delta") or 0.0) for r in records)}
    return {"mechanism": records[0].get("mechanism"), "claim": claim,
            "tokens_paid": mean_with_ci([float(r.get("tokens_paid") or 0) for r in records],
                                        seed=seed), **spent_summary(records)}


def spent_summary(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Over the records' ``document_loss`` (a DP mechanism's own ex-post loss of each
    example's documents, nats): how many losses, their median and largest magnitude, how many
    stay within their answer's claimed ε, and, where all do, the most often an answer's loss
    could be beyond it at 95 % confidence (Clopper–Pearson for none of n answers: the losses
    of one answer share its noise, so answers are the trials); nothing where no record has
    one."""
    answers = [([abs(float(v)) for v in r["document_loss"].values()], r.get("claim_eps"))
               for r in records if r.get("document_loss")]
    if not answers:
        return {}
    sizes = sorted(size for losses, _ in answers for size in losses)
    inside = sum(within_claim(size, eps) for losses, eps in answers for size in losses)
    # none beyond in n answers: the exact one-sided 95 % bound, 1 − 0.05^(1/n)
    bound = 1.0 - 0.05 ** (1.0 / len(answers)) if inside == len(sizes) else None
    return {"document_loss": {
        "documents": len(sizes), "answers": len(answers),
        "median": float(statistics.median(sizes)), "max": sizes[-1], "within_claim": inside,
        "beyond_at_most": bound}}


__all__ = ["CLAIM_FIELDS", "answer_request", "check_examples", "check_mechanism_options",
           "cid_claim", "cid_slots", "claim_fields", "claim_summary", "example_documents",
           "mechanism_fields", "mechanism_list", "mechanism_slots", "mechanism_streams",
           "measure_cid", "measure_mechanism",
           "spent_summary",
           "prompt_of", "resolve_datastore", "word_similarity"]
