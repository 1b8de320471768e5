"""Steps of vLLM's Model Runner V2 played by hand, for ctxleak's CID plugin: requests come and go
by slot (a free list, recycled as vLLM's ``RequestState`` recycles its slots), every step's rows
are shuffled, a request may be fed draft tokens (speculative rows: one row per draft, accepted
while each draft is the token sampled at the row before, as vLLM's rejection sampler accepts
them), prefilled in a partial chunk first (a row vLLM samples and discards) or preempted and
brought back (prefilled again with its output so far). The logits of a request at a step are a
fixed function of its name and step (:func:`logits_of`), so what the plugin decides can be
recomputed without it: :func:`reference` runs in-process CID's step on the same logits with
ctxleak's kernels (λ-mix at T in float64, bounded CID's Alg. 1, the seeded draw).

Torch and ctxleak's kernels and protocol only: the fast tier drives the plugin's slot logic
with it (tests/plugins/test_slots.py), and tests/served/runner_contract.py drives the plugin's
own class through vLLM's V2 loader with it, inside the server's environment.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from ctxleak.kernels.cid import MASKED_LOGIT, bounded_lambda, cid_logprobs
from ctxleak.kernels.draw import draw, seeded_generator
from ctxleak.plugins.protocol import pair_xargs, read_settings

V = 64
STOP = 0


def logits_of(name: str, step: int) -> torch.Tensor:
    """The float32 logits request ``name`` gets at ``step`` (a fixed draw of its own)."""
    gen = torch.Generator().manual_seed(zlib.crc32(f"{name}:{step}".encode()))
    return torch.randn(V, generator=gen) * 3


def garbage(tag: str) -> torch.Tensor:
    """Logits of a row whose sample vLLM throws away (they must not matter)."""
    gen = torch.Generator().manual_seed(zlib.crc32(f"garbage:{tag}".encode()))
    return torch.randn(V, generator=gen) * 5


@dataclass
class Req:
    """One request: ``pair`` names its answer and ``role`` its stream (None: a plain
    request); ``spec`` draft tokens per step, wrong from offset ``bad[step]`` at that engine
    step; ``chunked`` steps of partial prefill before the last chunk; ``preempt`` (out, back):
    the engine steps it leaves the batch and comes back at."""

    name: str
    prompt: list[int]
    max_tokens: int
    pair: str | None = None
    role: str = ""
    xargs: dict[str, Any] | None = None
    arrive: int = 0
    spec: int = 0
    bad: dict[int, int] = field(default_factory=dict)
    chunked: int = 0
    preempt: tuple[int, int] | None = None
    out: list[int] = field(default_factory=list)
    slot: int | None = None
    done: bool = False


@dataclass
class Params:
    """What the V2 interface's ``add_request`` reads of vLLM's ``SamplingParams``."""

    extra_args: dict[str, Any] | None
    max_tokens: int


def pair_of(pair: str, context: list[int], empty: list[int], max_tokens: int, *, lam: float,
            temperature: float, seed: int, eps: float | None = None, greedy: bool = False,
            min_new_tokens: int = 2, **knobs: Any) -> list[Req]:
    """The two requests of one answer, context stream first (``knobs`` go to both)."""
    xargs = pair_xargs(pair=pair, context_ids=context, lam=lam, temperature=temperature,
                       seed=seed, greedy=greedy, eps=eps, min_new_tokens=min_new_tokens,
                       stops=[STOP])
    return [Req(f"{pair[:4]}-{role}", prompt, max_tokens, pair, role, xargs, **knobs)
            for role, prompt in (("context", context), ("empty", empty))]


def reference(reqs: list[Req]) -> dict[str, list[dict[str, Any]]]:
    """Each pair's steps as in-process CID decides them on :func:`logits_of`'s logits."""
    out = {}
    for ctx in [r for r in reqs if r.role == "context"]:
        empty = next(r for r in reqs if r.pair == ctx.pair and r.role == "empty")
        cfg = read_settings(dict(ctx.xargs or {}))
        gen, steps = seeded_generator(cfg.seed), []
        for t in range(ctx.max_tokens):
            zc, ze = logits_of(ctx.name, t).double(), logits_of(empty.name, t).double()
            if t < cfg.min_new_tokens:
                zc[list(cfg.stops)], ze[list(cfg.stops)] = MASKED_LOGIT, MASKED_LOGIT
            lam, eps_ex_post = cfg.lam, None
            if cfg.eps is not None:
                lam, div = bounded_lambda(zc, ze, cfg.eps, cfg.lam, cfg.temperature)
                eps_ex_post = 2.0 * div
            mixed = cid_logprobs(zc, ze, lam, cfg.temperature)
            token = draw(mixed, gen, not cfg.greedy)
            logp_empty = torch.log_softmax(ze / cfg.temperature, dim=-1)[token]
            steps.append({"step": t, "token": token, "lam": lam, "logp_mix": float(mixed[token]),
                          "logp_empty": float(logp_empty), "eps_ex_post": eps_ex_post})
            if token in cfg.stops:
                break
        out[str(ctx.pair)] = steps
    return out


@dataclass
class Row:
    """One logits row of a step: its request, offset among the request's rows, the position
    and token of its input, and whether its sample is thrown away whatever happens."""

    req: Req
    offset: int
    pos: int
    fed: int
    discarded: bool
    logits: torch.Tensor


class Engine:
    """Plays the steps. ``driver`` holds the processor under test:
    ``add(req, prefill) -> slot``, ``remove(req)``, ``staged()``,
    ``apply(logits, slots, pos, offsets, inputs) -> logits`` and ``commit(req)`` (the runner's
    record of a request's new tokens). ``seen`` keeps, per (request, step), the output row of
    every row the plugin had to decide or force."""

    def __init__(self, reqs: list[Req], driver: Any, seed: int = 0, device: str = "cpu"
                 ) -> None:
        self.reqs, self.driver, self.device = reqs, driver, device
        self.rng = random.Random(seed)
        self.truth = reference(reqs)
        self.seen: dict[tuple[str, int], torch.Tensor] = {}
        self.untouched: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.most = 0  # the most tokens one request took in one step

    def run(self, max_steps: int = 60) -> None:
        for step in range(max_steps):
            for r in self.reqs:
                back = r.preempt is not None and step == r.preempt[1]
                if not r.done and (step == r.arrive or back):
                    r.slot = self.driver.add(r, r.prompt + r.out)
                if r.preempt is not None and step == r.preempt[0] and not r.done:
                    self.driver.remove(r)
                    r.slot = None
            self.driver.staged()
            rows = [row for r in self._live(step) for row in self._rows(r, step)]
            if not rows:
                if all(r.done for r in self.reqs):
                    return
                continue
            self.rng.shuffle(rows)
            logits = torch.stack([row.logits for row in rows])
            got = self.driver.apply(logits.to(self.device, copy=True),
                                    [row.req.slot for row in rows], [row.pos for row in rows],
                                    [row.offset for row in rows], [row.fed for row in rows])
            self._sample(step, rows, logits, got.cpu())
        raise AssertionError("the requests did not finish")

    def _live(self, step: int) -> list[Req]:
        return [r for r in self.reqs if not r.done and r.slot is not None and r.arrive <= step]

    def _rows(self, r: Req, step: int) -> list[Row]:
        prefill = len(r.prompt) + len(r.out)
        if r.chunked > 0:  # a partial chunk of the prefill: sampled, then thrown away
            r.chunked -= 1
            return [Row(r, 0, prefill // 2 - 1, 0, True, garbage(f"{r.name}:{step}"))]
        s = len(r.out)
        last = r.out[-1] if r.out else r.prompt[-1]
        rows = [Row(r, 0, prefill - 1, last, False, logits_of(r.name, s))]
        truth = self.truth.get(str(r.pair), [])
        chain = True
        for j in range(1, r.spec + 1 if s >= 1 else 1):
            want = int(truth[s + j - 1]["token"]) if s + j - 1 < len(truth) else 1
            fed = (want + 1) % V if j >= r.bad.get(step, r.spec + 1) or r.pair is None else want
            chain = chain and fed == want and r.pair is not None
            logits = logits_of(r.name, s + j) if chain else garbage(f"{r.name}:{step}:{j}")
            rows.append(Row(r, j, prefill - 1 + j, fed, False, logits))
        return rows

    def _sample(self, step: int, rows: list[Row], before: torch.Tensor,
                after: torch.Tensor) -> None:
        """vLLM's greedy pick and its rejection of drafts, then the new tokens committed."""
        by_req: dict[str, list[int]] = {}
        for i, row in enumerate(rows):
            by_req.setdefault(row.req.name, []).append(i)
            if row.req.pair is None or row.discarded:
                self.untouched.append((before[i], after[i]))
        for name, idx in by_req.items():
            idx.sort(key=lambda i: rows[i].offset)
            r = rows[idx[0]].req
            if rows[idx[0]].discarded:
                continue
            accepted = []
            for k, i in enumerate(idx):
                if k > 0 and rows[i].fed != accepted[-1]:
                    break  # the draft fed here is rejected: this row's sample is thrown away
                if k > 0 and (accepted[-1] == STOP or len(r.out) + k >= r.max_tokens):
                    break  # the request ends before this row
                if r.pair is not None:
                    self.seen[(name, len(r.out) + k)] = after[i].clone()
                accepted.append(int(torch.argmax(after[i])))
            self.most = max(self.most, len(accepted))
            for token in accepted:
                r.out.append(token)
                if token == STOP or len(r.out) >= r.max_tokens:
                    r.done = True
                    break
            self.driver.commit(r)
            if r.done:
                self.driver.remove(r)


def one_hot(token: int) -> torch.Tensor:
    """The row the plugin leaves where it forces ``token``."""
    row = torch.full((V,), float("-inf"))
    row[token] = 0.0
    return row


def check(engine: Engine, records: dict[str, dict[str, Any]], voided: Callable[[str], bool],
          tol: float = 0.0) -> None:
    """What every test of the plugin's V2 side asserts: each pair not ``voided`` has the
    records and both streams the tokens of in-process CID (its floats within ``tol``: 0 for
    the same arithmetic on the CPU), every row it decided or forced is the one-hot row of that
    step's token, and the rows of plain requests and of partial prefills are as vLLM computed
    them."""
    for before, after in engine.untouched:
        assert torch.equal(before, after)
    for pair, steps in engine.truth.items():
        if voided(pair):
            assert records[pair]["error"], records[pair]
            continue
        assert records[pair]["error"] is None, records[pair]["error"]
        got = records[pair]["steps"]
        assert [s["token"] for s in got] == [s["token"] for s in steps]
        for a, b in zip(got, steps):
            for key in ("lam", "logp_mix", "logp_empty", "eps_ex_post"):
                assert (a[key] is None) == (b[key] is None), (key, a, b)
                assert a[key] is None or abs(a[key] - b[key]) <= tol, (key, a, b)
        tokens = [s["token"] for s in steps]
        for r in [r for r in engine.reqs if r.pair == pair]:
            assert r.out == tokens, (r.name, r.out, tokens)
            for k, token in enumerate(tokens):
                if (r.name, k) in engine.seen:
                    assert torch.equal(engine.seen[(r.name, k)], one_hot(token))


def pair_id(k: int) -> str:
    return f"{k:x}" * 32


def shuffled_recycled() -> list[Req]:
    """Plain requests, a λ answer, a bounded one and a greedy one that arrives late, into
    the slots the first requests left."""
    return [Req("plain-a", [4, 5, 6], 2), Req("plain-b", [9, 9], 3, arrive=1),
            *pair_of(pair_id(1), [5, 6, 7, 8, 9], [7, 8, 9], 8, lam=0.5, temperature=0.8, seed=9),
            *pair_of(pair_id(2), [3, 4, 5, 6], [5, 6], 6, lam=1.0, temperature=1.0, seed=4,
                     eps=1.5),
            *pair_of(pair_id(3), [8, 7, 6, 5], [6, 5], 5, lam=0.7, temperature=0.9, seed=2,
                     greedy=True, min_new_tokens=0, arrive=4)]


def speculative() -> list[Req]:
    """Three drafts a step, right except from offset 2 at step 3 and from offset 1 at step 5
    (both streams alike), beside a plain request with drafts of its own."""
    return [*pair_of(pair_id(4), [5, 6, 7, 8], [7, 8], 12, lam=0.6, temperature=0.9, seed=7,
                     spec=3, bad={3: 2, 5: 1}),
            Req("plain-spec", [4, 4, 4], 6, spec=2)]


def prefill_preempt() -> list[Req]:
    """An answer prefilled in two partial chunks first, and one preempted at step 3 and back
    at step 5, under other slots (a plain request takes one at step 4)."""
    return [*pair_of(pair_id(5), [5, 6, 7, 8, 9, 10], [9, 10], 6, lam=0.5, temperature=0.8,
                     seed=1, chunked=2),
            *pair_of(pair_id(6), [3, 4, 5, 6], [5, 6], 8, lam=0.4, temperature=1.1, seed=3,
                     preempt=(3, 5)),
            Req("plain-c", [2, 3], 9, arrive=4)]


def parting() -> list[Req]:
    """The context stream's draft is wrong at step 2 and the other stream's right."""
    ctx, empty = pair_of(pair_id(7), [5, 6, 7, 8], [7, 8], 10, lam=0.5, temperature=0.8, seed=5,
                         spec=2)
    ctx.bad = {2: 1}
    return [ctx, empty]


#: name -> (the requests, the slots of the runner, the answers that must be voided)
SCENARIOS: dict[str, tuple[Callable[[], list[Req]], int, set[str]]] = {
    "shuffled-recycled": (shuffled_recycled, 7, set()),
    "speculative": (speculative, 8, set()),
    "prefill-preempt": (prefill_preempt, 6, set()),
    "parting": (parting, 8, {pair_id(7)}),
}
