"""Context Influence Decoding decoded inside a vLLM server by ctxleak's plugin: the client's half
(Estimating Privacy Leakage of Augmented Contextual Knowledge in Language Models, Def. 3.4;
bounded CID: App. B, Alg. 1). The server's half and the wire protocol:
:mod:`ctxleak.plugins.vllm_cid`, :mod:`ctxleak.plugins.protocol`.

- :func:`probe_plugin`: one tiny answer when ctxleak connects. Records back: the plugin is
  loaded, and the flags it runs under are checked (a server that would break pairs is refused,
  naming the flag); no records: the server has no plugin and CID decodes by whole distributions.
- :func:`decode_pairs`: each answer is one completions request with both prompts; its records
  (per token λ_t, log p̄_λ(y_t | D), log p(y_t | ∅) and bounded CID's ex-post ε) come back
  from ``/v1/ctxleak/pairs/{id}``. On a server with several data-parallel ranks (vLLM's
  ``--data-parallel-size``; the records' flags say how many) each answer is sent with an
  ``X-data-parallel-rank`` header drawn from its id (:func:`~ctxleak.plugins.protocol.pair_rank`):
  vLLM otherwise sends each prompt of a request to the least loaded engine, and an answer whose
  two requests land on two engines is void (retried, slower). The probe goes to rank 0, which
  every server has. The rank that decoded each answer, where the records say it, is counted
  in ``ranks``. Every answer is checked as it arrives: both streams hold the
  records' tokens, the steps run 0, 1, …, the numbers are possible (finite log-probs ≤ 0, λ_t in
  [0, λ], bounded CID's ex-post ε within its ε), and it ended where the limits say. A pair the
  plugin voided (its two requests fell out of step) or that fails a check is tried again with a
  new pair id, :data:`TRIES` times in all; then :class:`PairFailed` names why, and the caller
  decodes it by the whole-distribution route instead.
- Scoring: a job with ``forced`` tokens (:func:`~ctxleak.engine.pairs.scoring_job`) goes the
  same way, the plugin emitting those tokens instead of drawing them (protocol 2:
  :func:`scores_pairs` says whether the server's plugin takes them); its answer is checked as
  above and must hold exactly the forced tokens. Per position a few hundred bytes come back
  (the step's record) instead of every token's log-prob.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Sequence
from typing import Any

from ctxleak.engine.pairs import LedgerEntry, PairAnswer, PairJob
from ctxleak.engine.served.base import ServedLM
from ctxleak.engine.served_client import ServerError
from ctxleak.errors import ConfigError
from ctxleak.plugins.protocol import PAIRS_PATH, RANK_HEADER, UNKNOWN_PAIR, pair_rank, pair_xargs

#: Tries of one answer (a voided pair is tried again with a new id).
TRIES = 3
#: The flags of a server whose plugin ctxleak uses, in the words of a refusal.
SERVER_FLAGS = ("--logits-processors ctxleak.plugins.vllm_cid:CIDLogitsProcessor "
                "--middleware ctxleak.plugins.vllm_records.records_route "
                "--scheduler-cls ctxleak.plugins.vllm_pairing.PairingScheduler "
                "--no-enable-chunked-prefill")
#: Slack on a log-prob above 0 and on λ_t and ε beyond their bounds (float noise).
SLACK = 1e-6


class PairFailed(ServerError):
    """An answer the plugin could not decode in step after :data:`TRIES` tries."""


def probe_plugin(lm: ServedLM) -> dict[str, Any] | None:
    """The flags of the server's CID plugin, or None where it has none. One answer of one
    token on the probe text; a plugin whose server would break pairs is refused with a
    :class:`ConfigError` naming the flag."""
    ids = list(lm.bos_ids) + lm.encode("Context influence probe.")
    job = PairJob(tuple(ids), tuple(ids[:2]), lam=0.5, temperature=1.0, eps=None,
                  max_new_tokens=1, min_new_tokens=0, seed=0)
    pair = secrets.token_hex(16)
    try:
        lm.client.post("/v1/completions", _body(lm, job, pair), headers={RANK_HEADER: "0"})
        [got] = lm.client.get_each([PAIRS_PATH + pair])
    except ServerError:
        return None
    if isinstance(got, ServerError) or not isinstance(got, dict):
        return None
    server = got.get("server") or {}
    if got.get("error") is None and server.get("plugin") == "ctxleak-cid":
        check_flags(lm, server)
        return dict(server)
    return None


def plugin_protocol(server: dict[str, Any] | None) -> int:
    """The protocol version of the server's plugin (its flags, as :func:`probe_plugin` returns
    them): 0 where there is none or it does not say."""
    try:
        return int(server.get("protocol") or 0) if server is not None else 0
    except (TypeError, ValueError):
        return 0


def scores_pairs(server: dict[str, Any] | None) -> bool:
    """Whether the server's plugin takes teacher-forced answers (``ctxleak_forced``, protocol 2
    and later)."""
    return plugin_protocol(server) >= 2


def records_ex_post(server: dict[str, Any] | None) -> bool:
    """Whether the server's plugin records plain CID's ex-post ε where asked
    (``ctxleak_ex_post``, protocol 3 and later)."""
    return plugin_protocol(server) >= 3


def check_flags(lm: ServedLM, server: dict[str, Any]) -> None:
    """Refuse a plugin whose server would break pairs: chunked prefill on, or vLLM's own
    scheduler (which samples an answer's first stream before its second arrives)."""
    where = f"the vLLM server at {lm.info.base_url}"
    if server.get("chunked_prefill"):
        raise ConfigError(f"{where} runs ctxleak's CID plugin with chunked prefill on: start it "
                          "with --no-enable-chunked-prefill", param="server_url")
    if not server.get("pairing_scheduler"):
        raise ConfigError(f"{where} runs ctxleak's CID plugin without its scheduler, which "
                          "admits an answer's two streams together: start it with "
                          "--scheduler-cls ctxleak.plugins.vllm_pairing.PairingScheduler",
                          param="server_url")


def _body(lm: ServedLM, job: PairJob, pair: str) -> dict[str, Any]:
    stops = list(lm.eos_ids) or [0]
    return {"model": lm.info.served_model,
            "prompt": [list(job.context_ids), list(job.empty_ids)],
            "max_tokens": job.max_new_tokens, "temperature": 0.0, "stop_token_ids": stops,
            "return_token_ids": True,
            "vllm_xargs": pair_xargs(pair=pair, context_ids=list(job.context_ids),
                                     lam=job.lam, temperature=job.temperature, seed=job.seed,
                                     greedy=job.greedy, eps=job.eps,
                                     min_new_tokens=job.min_new_tokens, stops=stops,
                                     forced=job.forced, ex_post=job.ex_post)}


def check_fits(lm: ServedLM, job: PairJob, server: dict[str, Any]) -> None:
    """Refuse an answer whose two prompts cannot be admitted in one step of the server."""
    both = len(job.context_ids) + len(job.empty_ids)
    budget = int(server.get("max_num_batched_tokens") or 0)
    if budget and both > budget:
        raise ConfigError(f"an answer's two prompts are {both} tokens, more than the vLLM "
                          f"server at {lm.info.base_url} admits in one step "
                          f"(--max-num-batched-tokens {budget}): start it with a larger "
                          "--max-num-batched-tokens", param="server_url")


def rank_headers(pairs: Sequence[str], server: dict[str, Any]) -> list[dict[str, str]] | None:
    """Each answer's ``X-data-parallel-rank`` header, where the server has several ranks (None
    where it has one, or does not say)."""
    try:
        ranks = int(server.get("data_parallel_size") or 1)
    except (TypeError, ValueError):
        ranks = 1
    if ranks <= 1:
        return None
    return [{RANK_HEADER: str(pair_rank(p, ranks))} for p in pairs]


def decode_pairs(lm: ServedLM, jobs: Sequence[PairJob], server: dict[str, Any],
                 ranks: dict[int, int] | None = None) -> list[PairAnswer]:
    """One answer per job, decoded by the server's plugin and checked (module docstring);
    ``ranks`` counts the answers by the data-parallel rank that decoded them."""
    for job in jobs:
        check_fits(lm, job, server)
    out: list[PairAnswer | None] = [None] * len(jobs)
    why: dict[int, str] = {}
    todo = list(range(len(jobs)))
    for _ in range(TRIES):
        if not todo:
            break
        pairs = [secrets.token_hex(16) for _ in todo]
        bodies = [_body(lm, jobs[j], p) for j, p in zip(todo, pairs)]
        answers = lm.client.post_many("/v1/completions", bodies,
                                      headers=rank_headers(pairs, server))
        records = lm.client.get_each([PAIRS_PATH + p for p in pairs])
        still = []
        for j, answer, got in zip(todo, answers, records):
            try:
                out[j] = read_answer(lm, jobs[j], answer, got)
                rank = decoded_rank(got)
                if ranks is not None and rank is not None:
                    ranks[rank] = ranks.get(rank, 0) + 1
            except PairFailed as exc:
                why[j] = str(exc)
                still.append(j)
        todo = still
    if todo:
        raise PairFailed(f"{len(todo)} answer(s) fell out of step in the plugin of the vLLM "
                         f"server at {lm.info.base_url} {TRIES} times, e.g. {why[todo[0]]}")
    return [a for a in out if a is not None]


def decoded_rank(got: Any) -> int | None:
    """The data-parallel rank of the engine that decoded an answer, where its records say."""
    rank = (got.get("server") or {}).get("data_parallel_rank") if isinstance(got, dict) else None
    return rank if isinstance(rank, int) and not isinstance(rank, bool) else None


def read_answer(lm: ServedLM, job: PairJob, answer: Any, got: Any) -> PairAnswer:
    """One answer from its completions answer and its records, checked (module docstring);
    a void or inconsistent answer is :class:`PairFailed`."""
    where = f"the vLLM server at {lm.info.base_url}"
    if isinstance(got, ServerError):
        if UNKNOWN_PAIR in str(got):
            raise PairFailed(f"{where} kept no records of an answer")
        raise got
    if not isinstance(got, dict) or not isinstance(got.get("steps"), list):
        raise PairFailed(f"{where} answered records without a list of 'steps'")
    if got.get("error"):
        raise PairFailed(f"the plugin voided the answer: {got['error']}")
    steps = [_step(s, k, job, where) for k, s in enumerate(got["steps"])]
    tokens = [s.token_id for s in steps]
    for choice in lm._choices(answer, 2):
        if [int(t) for t in choice.get("token_ids") or []] != tokens:
            raise PairFailed(f"{where} answered a stream whose tokens are not the plugin's")
    if job.forced and tuple(tokens) != job.forced:
        raise PairFailed(f"{where} answered {len(tokens)} tokens that are not the "
                         f"{len(job.forced)} forced ones")
    stops = set(lm.eos_ids) or {0}
    stopped = bool(tokens) and tokens[-1] in stops
    if any(t in stops for t in tokens[:-1]) or not tokens or \
            (not stopped and len(tokens) != job.max_new_tokens) or \
            len(tokens) > job.max_new_tokens or bool(got.get("stopped")) != stopped:
        raise PairFailed(f"{where} ended an answer after {len(tokens)} tokens, against the "
                         f"limit of {job.max_new_tokens} and the EOS ids")
    return PairAnswer(token_ids=tuple(tokens[:-1] if stopped else tokens),
                      stopped_on_eos=stopped, steps=tuple(steps))


def _step(raw: Any, k: int, job: PairJob, where: str) -> LedgerEntry:
    """One step's record, checked: its index, finite log-probs ≤ 0, λ_t in [0, λ] (= λ for
    plain CID), bounded CID's ex-post ε within ε, plain CID's (where asked) finite and ≥ 0
    (no guarantee bounds it), none where not asked."""
    try:
        step = LedgerEntry(step=k, token_id=int(raw["token"]), lam=float(raw["lam"]),
                           logp_context=float(raw["logp_mix"]),
                           logp_empty=float(raw["logp_empty"]), eps=job.eps,
                           eps_ex_post=None if raw.get("eps_ex_post") is None
                           else float(raw["eps_ex_post"]))
        index = int(raw["step"])
    except (KeyError, TypeError, ValueError):
        raise PairFailed(f"{where} answered a record of step {k} without its fields") from None
    logps = (step.logp_context, step.logp_empty)
    bad = (index != k or not all(math.isfinite(v) and v <= SLACK for v in logps)
           or not -SLACK <= step.lam <= job.lam + SLACK
           or (job.eps is None and step.lam != job.lam)
           or (job.eps is not None and (step.eps_ex_post is None or
                                        not 0 <= step.eps_ex_post <= job.eps + SLACK))
           or (job.eps is None and job.ex_post != (step.eps_ex_post is not None))
           or (step.eps_ex_post is not None and not 0 <= step.eps_ex_post < math.inf))
    if bad:
        raise PairFailed(f"{where} answered an impossible record at step {k} (λ_t "
                         f"{step.lam}, log-probs {logps}, ex-post ε {step.eps_ex_post})")
    return step
