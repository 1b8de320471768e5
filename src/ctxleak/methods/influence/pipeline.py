"""Expected context influence over a dataset (Estimating Privacy Leakage of Augmented Contextual
Knowledge in Language Models, Def. 3.3, Eq. 5): one CID response per example, its token and response
influence, n-gram windows, regurgitation and quality."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any, NamedTuple, cast

import numpy as np

from ctxleak.engine.lm import LanguageModel
from ctxleak.errors import ConfigError, warn
from ctxleak.methods.influence.answers import (
    AnswersToScore,
    ScoredAnswers,
    Scorer,
    answer_windows,
    eos_masked,
    own_answers,
    score_responses,
)
from ctxleak.methods.influence.classes import public_prompt
from ctxleak.methods.influence.control import (
    ControlCost,
    control_fields,
    control_set_fields,
)
from ctxleak.methods.influence.data import InfluenceExample, passage_spans, prompt_parts
from ctxleak.methods.influence.decoys import Ablated, DecoyJob, Decoys, decoy_influence, decoy_jobs
from ctxleak.methods.influence.fields import (
    add_passage_fields,
    add_token_fields,
    response_record,
    window_fields,
    with_logprobs,
)
from ctxleak.methods.influence.ngrams import (
    PromptParts,
    WindowInfluence,
    WindowRequest,
    window_influence_many,
)
from ctxleak.methods.influence.roads import ANSWERS, road
from ctxleak.methods.influence.setting import InfluenceOptions, Setting
from ctxleak.mitigations.cid import CID
from ctxleak.mitigations.ledger import RowLedger

#: The control examples of each job, nearest first (empty: the job has none).
Controls = Sequence[Sequence[InfluenceExample]]


class Job(NamedTuple):
    """One measurement: the example, its setting and its seed (the run seed and the example's
    index, :func:`~ctxleak.engine.generation.derive_seed`)."""

    example: InfluenceExample
    setting: Setting
    seed: int


def measure_example(lm: LanguageModel, example: InfluenceExample, setting: Setting,
                    options: InfluenceOptions, seed: int) -> dict[str, Any]:
    """Generate by CID and measure the context's influence on one example (one JSON record)."""
    return measure_examples(lm, [Job(example, setting, seed)], options)[0]


def example_parts(lm: LanguageModel, example: InfluenceExample, setting: Setting,
                  options: InfluenceOptions) -> tuple[PromptParts, int]:
    """The example's prompt parts under ``setting`` (context cut to the window) and how many
    context tokens the window forced out; its prompt without the documents holds its public
    ones (:mod:`.classes`) where it has them."""
    parts, dropped = prompt_parts(lm, example, options.template, setting.context_tokens,
                                  reserve=options.max_new_tokens)
    public = public_prompt(lm, example, options.template, setting.context_tokens,
                           options.max_new_tokens)
    return (parts if public is None else replace(parts, empty_ids=public)), dropped


def measure_examples(lm: LanguageModel, jobs: Sequence[Job], options: InfluenceOptions, *,
                     hand_over_prefill: bool = True, controls: Controls | None = None,
                     cost: ControlCost | None = None,
                     decoys: Decoys | None = None) -> list[dict[str, Any]]:
    """Measure several (example, setting, seed) together, one JSON record each, in order: their
    responses asked of CID's mechanism (:meth:`~ctxleak.mitigations.cid.CID.answer_group`) and
    decoded in one batched KV cache (each from its own seed, so its tokens do not depend on the
    batch), then the n-gram windows scored
    (:func:`~ctxleak.methods.influence.ngrams.window_influence_many`). The model's batching
    policy decides which floats may share forward passes (:mod:`ctxleak.engine.batching`).

    At a fixed λ with n-gram windows the response's floats come from the example's window
    scoring (its full-context row is log p̄_λ(y_t | D); the no-context row is added), so the
    generation's floats need no replay. ``hand_over_prefill``: with n-gram windows, each prompt
    with the context is prefilled alone and its KV cache handed to the scoring, which then does
    not compute that prefix again (the same numbers; False recomputes it, for benchmarks).

    Passages (an example with ``passages``): each passage left out and the response scored,
    Def. 3.1 with S = that passage, in the same scoring run as the n-gram windows
    (:mod:`ctxleak.methods.rag.passages`). ``controls``: the control examples of each job
    (None: no control), each of whose contexts replaces the job's to score the same response
    (:mod:`.control`); ``cost`` adds up the control's forward passes and seconds. ``decoys``:
    each job's decoy per passage, in its place (:mod:`.decoys`), scored with the controls."""
    given = [k for k, (ex, _, _) in enumerate(jobs) if ex.response_source != "generated"]
    if given:  # logged answers are scored, the others generated
        return _with_given(lm, jobs, options, given, hand_over_prefill, controls, cost, decoys)
    if _road(lm, jobs, options) == ANSWERS:  # the model's own answers, sampled then scored
        return _measure_own_answers(lm, jobs, options, controls, cost, decoys)
    parts = _example_parts(lm, jobs, options)
    rescored = options.ngram is not None and options.bounded_eps is None
    caches: list[Any] | None = [] if hand_over_prefill and options.ngram is not None \
        and options.reuse_prefix else None
    asked = [options.asked(setting, p, (ex.context,), seed)
             for (p, _), (ex, setting, seed) in zip(parts, jobs)]
    answers = CID().answer_group(lm, asked, deployed=False, context_caches=caches,
                                 rescored=rescored)
    responses = [cast(RowLedger, a.ledger) for a in answers]  # CID's answers carry their ledger
    todo = [k for k, r in enumerate(responses) if r.response_ids]
    spans_of = [passage_spans(lm, ex, len(p.context)) for (ex, _, _), (p, _) in zip(jobs, parts)]
    clipped: set[int] = set()
    if options.ngram is None:  # only the passages left out, of the responses that have some
        todo = [k for k in todo if spans_of[k]]
        requests = [_request(jobs[k], parts[k][0], responses[k].response_ids,
                             _kept(spans_of[k]), options) for k in todo]
    else:
        requests, clipped = _window_requests(jobs, parts, responses, caches, todo, options,
                                             rescored, [_kept(spans_of[k]) for k in todo])
    scored = window_influence_many(lm, requests, reuse_prefix=options.reuse_prefix)
    if rescored:  # every float of these responses from their own window scoring
        for k, win in zip(todo, scored):
            assert win.logp_empty is not None  # rescored window requests ask for it
            responses[k] = with_logprobs(responses[k], win.logp_context, win.logp_empty)
    return _records(lm, jobs, parts, responses, spans_of, clipped, zip(todo, requests, scored),
                    options, controls, cost, decoys)


def _records(lm: LanguageModel, jobs: Sequence[Job], parts: Sequence[tuple[PromptParts, int]],
             responses: Sequence[RowLedger],
             spans_of: Sequence[Sequence[tuple[int, int] | None]], clipped: set[int],
             scored: Iterable[tuple[int, WindowRequest, WindowInfluence]],
             options: InfluenceOptions, controls: Controls | None, cost: ControlCost | None,
             decoys: Decoys | None, scorer: Scorer | None = None) -> list[dict[str, Any]]:
    """The jobs' records from their ``responses`` (ledgers): ``ngram_clipped_from`` where n was
    cut to the context (``clipped``), the n-gram windows' and the passages' fields of the
    ``scored`` ones ((job index, its request, its scoring): the windows first, then the
    passages), the per-token fields, then the controls and the decoys in the passages' places
    (:func:`_add_control`, :func:`.decoys.decoy_jobs`)."""
    records = [response_record(lm, ex, setting, options, seed, p, dropped, response)
               for (ex, setting, seed), (p, dropped), response in zip(jobs, parts, responses)]
    for k in clipped:
        records[k]["ngram_clipped_from"] = options.ngram
    ablated: Ablated = {}
    for k, request, win in scored:
        n_windows = len(request.spans) - len(_kept(spans_of[k]))
        if options.ngram is not None:
            records[k].update(window_fields(request, win, options, n_windows))
        if spans_of[k]:
            ablated[k] = add_passage_fields(records[k], jobs[k].example, spans_of[k], win, n_windows)
    add_token_fields(records, parts, responses)
    _add_control(lm, records, jobs, [r.response_ids for r in responses], controls, options, cost,
                 scorer, decoy_jobs(lm, records, [job.example for job in jobs], parts, spans_of,
                                    ablated, decoys, options), own=[p for p, _ in parts])
    return records


def _kept(spans: Sequence[tuple[int, int] | None]) -> list[tuple[int, int]]:
    """The spans of the passages still in the context (those cut out are not scored)."""
    return [s for s in spans if s is not None]


def _request(job: Job, parts: PromptParts, response: Sequence[int],
             spans: Sequence[tuple[int, int]], options: InfluenceOptions) -> WindowRequest:
    """The scoring request of ``response`` (token ids) under ``parts`` leaving out each of
    ``spans``, at the job's λ and T (bounded CID: each context its own λ_t, Alg. 1)."""
    return WindowRequest(parts, list(response), list(spans), lam=job.setting.lam,
                         temperature=job.setting.temperature,
                         min_new_tokens=options.min_new_tokens,
                         bounded_eps=options.bounded_eps)


def _add_control(lm: LanguageModel, records: list[dict[str, Any]], jobs: Sequence[Job],
                 answers: Sequence[Sequence[int]], controls: Controls | None,
                 options: InfluenceOptions,
                 cost: ControlCost | None, scorer: Scorer | None = None,
                 decoys: Sequence[DecoyJob] = (), *, own: Sequence[PromptParts]) -> None:
    """Score each answer (token ids) with its control context (the same query and template,
    another example's context) at the job's λ and T, and add the control fields to its
    record; with ``decoys``, in the same scoring, each answer with a decoy in a passage's place
    (``passage_decoy_influence``, :func:`.decoys.decoy_influence`). ``scorer``: see
    :func:`_score_under`. ``own``: each job's own prompt, whose KV cache a control or decoy
    prompt starts from in-process, up to where the two differ (the template before the
    context; a decoy's passages before its own)."""
    if not options.control or controls is None:
        return
    start = time.perf_counter()
    todo = [(k, j) for k, cs in enumerate(controls) if answers[k] for j in range(len(cs))]
    c_parts = [example_parts(lm, controls[k][j], jobs[k].setting, options)[0] for k, j in todo]
    decoys = [d for d in decoys if answers[d.job]]
    owners = [k for k, _ in todo] + [d.job for d in decoys]
    bases = [tuple(own[k].full[:-1]) for k in owners]
    rows, requests = _score_under(lm, jobs, answers, owners, c_parts + [d.parts for d in decoys],
                                  options, scorer, bases)
    for d, row in zip(decoys, rows[len(todo):]):
        records[d.job]["passage_decoy_influence"][d.passage] = round(
            decoy_influence(row, d.ablated), 6)
    logp_control = dict(zip(todo, rows))
    for k, cs in enumerate(controls):
        if not cs:
            records[k].update(control_fields(None, None, records[k]))
            continue
        logps = [logp_control.get((k, j), np.zeros(0)) for j in range(len(cs))]
        records[k].update(control_fields(cs[0].id, logps[0], records[k]))
        records[k].update(control_set_fields([c.id for c in cs], logps, records[k]))
    if cost is None:
        return
    cost.decoy_forward_passes += len(decoys)
    if scorer is score_responses:  # a served model: each answer with the control context
        cost.forward_passes += len(owners)
        cost.examples += len(set(owners))
        cost.seconds += time.perf_counter() - start
    else:
        cost.add(requests, time.perf_counter() - start, responses=owners)


def _score_under(lm: LanguageModel, jobs: Sequence[Job],
                 answers: Sequence[Sequence[int]], owners: Sequence[int],
                 parts: Sequence[PromptParts], options: InfluenceOptions,
                 scorer: Scorer | None, bases: Sequence[tuple[int, ...]] | None = None
                 ) -> tuple[list[np.ndarray], list[WindowRequest]]:
    """log p̄_λ(y_t | C) of answer ``owners[i]`` under the prompt ``parts[i]`` (another
    context), at its job's λ and T, and the requests scored (in-process only). ``scorer``:
    None scores in-process with the CID mixture (:func:`window_influence_many`, bounded CID
    included); :func:`_score_in_process` (answers drawn elsewhere, in-process) the same way
    as it scores them, at one λ; :func:`~ctxleak.methods.influence.answers.score_responses`
    from a served model's log-probs. Only the prompt with C is scored: each answer's
    no-context log-probs are its record's already (the no-context logits are computed only
    where the mixture needs them, λ ≠ 1). ``bases[i]``: the prompt whose KV cache prompt i
    starts from in-process (:attr:`WindowRequest.base`)."""
    if scorer is score_responses:
        return eos_masked(lm, [p.full for p in parts], [list(answers[k]) for k in owners],
                          options.min_new_tokens), []
    if scorer is None:
        requests = [_request(jobs[k], p, answers[k], [], options) for k, p in zip(owners, parts)]
    else:
        drawn = answers_under(jobs, answers, owners, parts, options)
        requests = [drawn.request(i, []) for i in range(len(owners))]
    if bases is not None:
        requests = [replace(r, base=b) for r, b in zip(requests, bases)]
    reuse = options.reuse_prefix if scorer is None else True
    return [win.logp_context for win in
            window_influence_many(lm, requests, reuse_prefix=reuse)], requests


def answers_under(jobs: Sequence[Job], answers: Sequence[Sequence[int]], owners: Sequence[int],
                  parts: Sequence[PromptParts], options: InfluenceOptions) -> AnswersToScore:
    """Answer ``owners[i]`` (token ids) under the prompt ``parts[i]``, at its job's λ and T,
    as answers drawn elsewhere are scored (no n-gram windows, no passages)."""
    return AnswersToScore(list(parts), [(list(answers[k]), False) for k in owners],
                          lam=[jobs[k].setting.lam for k in owners],
                          temperature=[jobs[k].setting.temperature for k in owners],
                          min_new_tokens=options.min_new_tokens, ngram=None, stride=None,
                          ids=[jobs[k].example.id for k in owners])


def _with_given(lm: LanguageModel, jobs: Sequence[Job], options: InfluenceOptions,
                given: Sequence[int], hand_over_prefill: bool,
                controls: Controls | None = None, cost: ControlCost | None = None,
                decoys: Decoys | None = None) -> list[dict[str, Any]]:
    """:func:`measure_examples` where the jobs in ``given`` carry a logged answer (the
    ``response`` field): those answers are scored as CID at the setting's λ and T would have
    produced them (no EOS after them: a logged answer's end is not known to be one), the other
    jobs generated as usual."""
    if options.bounded_eps is not None:
        raise ConfigError("a logged response (the data's 'response' field) cannot be scored "
                          "under bounded CID, which picks its λ_t while generating: leave "
                          "bounded_eps unset, or drop the response field",
                          param="bounded_eps")
    mine = [jobs[k] for k in given]
    records = score_drawn(lm, mine, [(ex.logged_ids(lm), False) for ex, _, _ in mine], options,
                          None if controls is None else [controls[k] for k in given], cost,
                          None if decoys is None else [decoys[k] for k in given])
    out = dict(zip(given, records))
    others = [k for k in range(len(jobs)) if k not in out]
    if others:
        out.update(zip(others, measure_examples(
            lm, [jobs[k] for k in others], options, hand_over_prefill=hand_over_prefill,
            controls=None if controls is None else [controls[k] for k in others], cost=cost,
            decoys=None if decoys is None else [decoys[k] for k in others])))
    return [out[k] for k in range(len(jobs))]


def score_drawn(lm: LanguageModel, jobs: Sequence[Job],
                answers: Sequence[tuple[list[int], bool]], options: InfluenceOptions,
                controls: Controls | None = None, cost: ControlCost | None = None,
                decoys: Decoys | None = None) -> list[dict[str, Any]]:
    """The records of answers drawn elsewhere, (token ids, stopped on EOS) per job (a logged
    answer, another mechanism's): each scored as CID at its job's λ and T would have produced
    it, as :func:`measure_examples` scores its own (whole context, windows, passages, control,
    decoys), in-process or from a served model's log-probs."""
    parts = _example_parts(lm, jobs, options)
    scorer = score_responses if _road(lm, jobs, options) == ANSWERS else _score_in_process
    return _scored_records(lm, jobs, parts, answers, options, scorer, controls, cost, decoys)


def _score_in_process(lm: LanguageModel, answers: AnswersToScore) -> ScoredAnswers:
    """:func:`~ctxleak.methods.influence.answers.score_responses` in-process: each answer
    scored teacher-forced under CID at its λ and T, with and without the context, each
    n-gram window and each passage (:func:`window_influence_many`), EOS masked before
    ``min_new_tokens``."""
    clipped: set[int] = set()
    requests = [answers.request(k, answers.spans(k, clipped), with_empty=True)
                for k in range(len(answers.parts))]
    wins = window_influence_many(lm, requests)
    ledgers = []
    for k, win in enumerate(wins):
        empty = win.logp_empty if win.logp_empty is not None else np.zeros(0)
        ledgers.append(answers.ledger(k, answers.responses[k][0], win.logp_context, empty,
                                      False))
    return ScoredAnswers(ledgers, [r if r.spans else None for r in requests],
                         [w if r.spans else None for r, w in zip(requests, wins)], clipped)


def _scored_records(lm: LanguageModel, jobs: Sequence[Job],
                    parts: Sequence[tuple[PromptParts, int]],
                    answers: Sequence[tuple[list[int], bool]], options: InfluenceOptions,
                    scorer: Scorer, controls: Controls | None,
                    cost: ControlCost | None, decoys: Decoys | None = None
                    ) -> list[dict[str, Any]]:
    """The records of answers already drawn (a served model's, or logged ones), each scored by
    ``scorer`` (:func:`~ctxleak.methods.influence.answers.score_responses` or
    :func:`_score_in_process`) with and without the context, each n-gram window and each
    passage (Def. 3.1 with S = the window or passage), then under its control context."""
    spans_of = [passage_spans(lm, ex, len(p.context)) for (ex, _, _), (p, _) in zip(jobs, parts)]
    ledgers, requests, wins, clipped = scorer(lm, AnswersToScore(
        [p for p, _ in parts], answers, lam=[s.lam for _, s, _ in jobs],
        temperature=[s.temperature for _, s, _ in jobs],
        min_new_tokens=options.min_new_tokens, ngram=options.ngram, stride=options.stride,
        ids=[ex.id for ex, _, _ in jobs], passages=[_kept(spans) for spans in spans_of]))
    return _records(lm, jobs, parts, ledgers, spans_of, clipped,
                    ((k, r, w) for k, (r, w) in enumerate(zip(requests, wins))
                     if r is not None and w is not None), options, controls, cost, decoys, scorer)


def _road(lm: LanguageModel, jobs: Sequence[Job], options: InfluenceOptions) -> str:
    """The road these jobs take on ``lm`` (:func:`~ctxleak.methods.influence.roads.road`: the
    same needs the run was checked against, checked again here)."""
    return road(lm, [s.lam for _, s, _ in jobs], [s.temperature for _, s, _ in jobs],
                options.bounded_eps)


def _measure_own_answers(lm: LanguageModel, jobs: Sequence[Job], options: InfluenceOptions,
                         controls: Controls | None = None, cost: ControlCost | None = None,
                         decoys: Decoys | None = None) -> list[dict[str, Any]]:
    """:func:`measure_examples` on the :data:`~ctxleak.methods.influence.roads.ANSWERS` road
    (λ = 1, T = 1): each answer sampled by the model from its own seed, then scored
    (:mod:`ctxleak.methods.influence.answers`)."""
    parts = _example_parts(lm, jobs, options)
    responses: list[tuple[list[int], bool]] = [([], False)] * len(jobs)
    for temperature in sorted({setting.temperature for _, setting, _ in jobs}):
        ks = [k for k, (_, setting, _) in enumerate(jobs) if setting.temperature == temperature]
        drawn = own_answers(lm, [parts[k][0] for k in ks], [jobs[k].seed for k in ks],
                                 0.0 if options.greedy else temperature, options.max_new_tokens,
                                 options.min_new_tokens)
        for k, answer in zip(ks, drawn):
            responses[k] = answer
    return _scored_records(lm, jobs, parts, responses, options, score_responses, controls,
                           cost, decoys)


def _example_parts(lm: LanguageModel, jobs: Sequence[Job], options: InfluenceOptions
                   ) -> list[tuple[PromptParts, int]]:
    """Each job's prompt parts and the context tokens cut to fit the window (warned)."""
    parts = []
    for example, setting, _ in jobs:
        p, dropped = example_parts(lm, example, setting, options)
        if dropped:
            warn(f"example {example.id}: context cut by {dropped} tokens to fit the "
                 "model's window")
        parts.append((p, dropped))
    return parts


def _window_requests(jobs: Sequence[Job],
                     parts: Sequence[tuple[PromptParts, int]], responses: Sequence[RowLedger],
                     caches: list[Any] | None, todo: Sequence[int], options: InfluenceOptions,
                     with_empty: bool, extra_spans: Sequence[Sequence[tuple[int, int]]]
                     ) -> tuple[list[WindowRequest], set[int]]:
    """The n-gram scoring request of each response in ``todo`` (n clipped to the context, and
    which were clipped), its passages' spans (``extra_spans``, one list per item of
    ``todo``) scored after its windows in the same request. Each request takes over its
    response's handed-over KV cache (``caches[k]``, when kept)."""
    assert options.ngram is not None
    requests: list[WindowRequest] = []
    clipped: set[int] = set()
    for k, extra in zip(todo, extra_spans):
        p, (example, setting, _) = parts[k][0], jobs[k]
        response = responses[k]
        # documented choice: n clipped to the whole context, and recorded (answer_windows)
        spans = answer_windows(p, response.response_ids, options.ngram, options.stride,
                               example.id, clipped, k)
        # bounded CID: D and every D∖D_i are scored as the mechanism runs on them, each with
        # its own λ_t by Alg. 1 (Def. 3.1 with Thm B.1)
        requests.append(WindowRequest(p, response.response_ids, spans + list(extra),
                                      lam=setting.lam, temperature=setting.temperature,
                                      min_new_tokens=options.min_new_tokens,
                                      prefix_cache=caches[k] if caches else None,
                                      bounded_eps=options.bounded_eps, with_empty=with_empty))
        if caches:
            caches[k] = None  # the request holds it until scored
    return requests, clipped
