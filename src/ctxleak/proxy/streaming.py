"""A streamed CID answer of the privacy proxy: decoded and settled in a task of its own, each
token sent to the client as OpenAI ``chat.completion.chunk`` server-sent events as it is drawn
(Context Influence Decoding, Estimating Privacy Leakage of Augmented Contextual Knowledge in
Language Models, Def. 3.4; bounded: App. B, Alg. 1). And the settling of any answer, streamed
or not (:func:`settle_released`): an answer a served model's server sampled itself (λ = 1,
T = 1) is released at once and scored with and without the context afterwards.

A defence other than CID (:mod:`ctxleak.proxy.mechanism`) decodes the whole answer before
its release: its stream sends the finished answer in the same chunks
(:func:`answer_and_settle`).

The task tells the stream what happened through a queue of events: ``("token", id)`` for each
drawn token, then ``("done", (answer, ctxleak field))`` or ``("failed", exception)``."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from starlette.concurrency import run_in_threadpool

from ctxleak.engine.lm import LanguageModel
from ctxleak.mitigations.ledger import LedgerEntry
from ctxleak.proxy.charging import AnyRequest, Charging, Held, ledger_fields
from ctxleak.proxy.decode import Answer, Sampled
from ctxleak.proxy.errors import failed_midway
from ctxleak.proxy.mechanism import Reply
from ctxleak.proxy.request import CIDRequest, Document, MechanismRequest

#: One event of the decoding task: its kind (``token``, ``done``, ``failed``) and value.
Event = tuple[str, Any]
log = logging.getLogger("ctxleak.proxy")

#: The proxy's decoding: the request, its documents, and a call for each drawn token's entry;
#: the answer, or the one a served model's server sampled, still to be scored.
Decode = Callable[[CIDRequest, Sequence[Document], Callable[[LedgerEntry], None] | None],
                  Answer | Sampled]


async def decode_and_settle(decode: Decode, charging: Charging, request: CIDRequest, held: Held,
                            events: asyncio.Queue[Event], later: set[asyncio.Future[None]]
                            ) -> None:
    """Decode the answer, each drawn token put in ``events`` as it comes, then settle its
    budget (:func:`settle_released`, a scoring after the release kept in ``later``); whatever
    happens, the last event says how it ended. A client that goes away mid-answer changes
    nothing: what was drawn is charged (a failed decoding: the tokens already sent; a failed
    ledger: the reservation stays open)."""
    loop = asyncio.get_running_loop()
    drawn: list[LedgerEntry] = []

    def heard(entry: LedgerEntry) -> None:  # in the decoding thread
        drawn.append(entry)
        loop.call_soon_threadsafe(events.put_nowait, ("token", entry.token_id))

    outcome: Event = ("failed", RuntimeError("the answer was not finished"))
    try:  # whatever happens, the stream hears how it ended
        try:
            released = await run_in_threadpool(decode, request, held.docs, heard)
        except Exception as exc:
            outcome = ("failed", exc)
            await charging.settle_drawn(request, held, drawn)  # the tokens sent are spent
            return
        try:
            outcome = ("done", await settle_released(charging, request, held, released, later))
        except Exception as exc:  # the ledger itself failed: the reservation stays open
            outcome = ("failed", exc)
            return
    finally:
        events.put_nowait(outcome)


async def answer_and_settle(answer: Callable[[MechanismRequest, Sequence[Document]], Reply],
                            charging: Charging, request: MechanismRequest, held: Held,
                            events: asyncio.Queue[Event]) -> None:
    """A mechanism other than CID decodes the whole answer before anything is released: decode
    it, settle its budget (:meth:`Charging.settle_mechanism`), then put its tokens in
    ``events`` (the stream sends them in chunks, as CID's as they are drawn) and how it ended.
    A failure before the answer is whole releases nothing: the reservation is given back."""
    outcome: Event = ("failed", RuntimeError("the answer was not finished"))
    try:
        try:
            reply = await run_in_threadpool(answer, request, held.docs)
        except Exception as exc:
            outcome = ("failed", exc)
            await charging.release_unspent(held)  # nothing was released
            return
        try:
            info = await charging.settle_mechanism(request, reply, held)
        except Exception as exc:  # the ledger itself failed: the reservation stays open
            outcome = ("failed", exc)
            return
        for token in reply.answer.response_ids:
            events.put_nowait(("token", token))
        outcome = ("done", (reply, info))
    finally:
        events.put_nowait(outcome)


async def settle_released(charging: Charging, request: CIDRequest, held: Held,
                          released: Answer | Sampled, later: set[asyncio.Future[None]]
                          ) -> tuple[Answer, dict[str, Any]]:
    """The answer to release and its ``ctxleak`` field. A decoded answer is settled first
    (:meth:`Charging.settle`). An answer its server sampled (λ = 1, T = 1, nothing it spends is
    known before it is scored, and its reservation, made before decoding, is zero) is
    released at once: its field has the tokens and ``influence`` null, and it is scored with
    and without the context and settled in a task kept in ``later`` until done."""
    if isinstance(released, Answer):
        return released, await charging.settle(request, released, held)
    kept = {d.id for d in held.docs}
    info = ledger_fields(request, released.answer, [i for i in held.ids if i in kept],
                         held.dropped)
    info["influence"] = None  # scored after the release: in the request log
    task = asyncio.ensure_future(_score_and_settle(charging, request, held, released))
    later.add(task)
    task.add_done_callback(later.discard)
    return released.answer, info


async def _score_and_settle(charging: Charging, request: CIDRequest, held: Held,
                            released: Sampled) -> None:
    """Score a released answer with and without its context, settle its reservation and log
    its influence; if the scoring fails, the reservation is settled on the released tokens
    (:meth:`Charging.settle_drawn`) and the failure logged."""
    try:
        answer = await run_in_threadpool(released.scored)
    except Exception as exc:
        log.warning(json.dumps({"event": "cid_scoring_failed", "id": held.rid,
                                "error": type(exc).__name__}))
        await charging.settle_drawn(request, held, released.answer.ledger.entries)
        return
    try:
        await charging.settle(request, answer, held)
    except Exception:  # the ledger failed: the reservation stays open, charged in full
        log.exception("the ledger failed settling a released answer")
        return
    influence = float(sum(e.influence for e in answer.ledger.entries))
    log.info(json.dumps({"event": "cid_scored", "id": held.rid,
                         "influence": influence if math.isfinite(influence) else None}))


async def sse_chunks(lm: LanguageModel, rid: str, request: AnyRequest, first: Event,
                     events: asyncio.Queue[Event]) -> AsyncIterator[str]:
    """The answer as OpenAI ``chat.completion.chunk`` server-sent events: the role, then a
    chunk for each drawn token as soon as its text is complete, then the finish reason with
    the ``ctxleak`` field (and the usage when asked), then ``[DONE]``. A failure mid-answer
    is an ``error`` event, as OpenAI's streams carry one. A mechanism's answer (a
    :class:`~ctxleak.proxy.mechanism.Reply`) comes the same way, once it is whole."""
    created = int(time.time())

    def event(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
        chunk = {"id": rid, "object": "chat.completion.chunk", "created": created,
                 "model": request.model,
                 "choices": [{"index": 0, "delta": delta, "finish_reason": finish,
                              "logprobs": None}], **extra}
        return f"data: {json.dumps(chunk)}\n\n"

    yield event({"role": "assistant", "content": ""})
    ids: list[int] = []
    sent = ""
    stops = set(lm.eos_ids)
    kind, value = first
    while kind == "token":
        if value not in stops:  # the stopping EOS is no text
            ids.append(value)
            text = lm.decode(ids)
            if text.startswith(sent) and len(text) > len(sent):
                yield event({"content": text[len(sent):]})
                sent = text
        kind, value = await events.get()
    if kind == "failed":
        error = failed_midway(value, len(ids), lm.info.source == "served")
        yield f"data: {json.dumps(error.body())}\n\n"
        yield "data: [DONE]\n\n"
        return
    answer, info = value
    if answer.text.startswith(sent) and len(answer.text) > len(sent):
        yield event({"content": answer.text[len(sent):]})
    yield event({}, answer.finish_reason, ctxleak=info)
    if request.include_usage:  # OpenAI's last chunk: no choices, the usage
        usage = {"id": rid, "object": "chat.completion.chunk", "created": created,
                 "model": request.model, "choices": [], "usage": answer.usage}
        yield f"data: {json.dumps(usage)}\n\n"
    yield "data: [DONE]\n\n"
