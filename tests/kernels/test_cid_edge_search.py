"""Bounded CID's λ_t search (:func:`ctxleak.kernels.cid.bounded_lambdas`; Estimating Privacy
Leakage of Augmented Contextual Knowledge in Language Models, App. B, Alg. 1 line 2) against a
plain 60-step bisection written out here: the same λ_t within 1e-12, the bound held at it, in a
handful of passes over the vocabulary per row."""

from __future__ import annotations

import math

import pytest
import torch

from ctxleak.kernels import cid
from ctxleak.kernels.cid import BOUND_MARGIN, MASKED_LOGIT, bounded_lambdas


def _edge_by_bisection(zc, ze, eps, lam_max, temperature, steps=60):
    """Alg. 1 line 2 by plain bisection, one row at a time: λ_max where the bound holds there,
    else the largest λ found to keep ``max_y |log p̄_λ(y) − log p(y|∅)| ≤ ε/2 − margin`` over the
    tokens masked in neither stream (λ_max · 2⁻⁶⁰ below the edge at most)."""
    half = eps / 2 - BOUND_MARGIN
    out = []
    for a, b in zip(zc.double(), ze.double()):
        base = torch.log_softmax(b / temperature, -1)
        valid = (a > MASKED_LOGIT / 2) & (b > MASKED_LOGIT / 2)

        def gap(lam, a=a, b=b, base=base, valid=valid):
            mixed = torch.log_softmax((lam * a + (1 - lam) * b) / temperature, -1)
            return float((mixed - base).abs()[valid].max())

        if gap(lam_max) <= half:
            out.append(lam_max)
            continue
        lo, hi = 0.0, lam_max
        for _ in range(steps):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if gap(mid) <= half else (lo, mid)
        out.append(lo)
    return out


def _rows(kind: str, rows: int, vocab: int, seed: int):
    """``[rows, vocab]`` logits of one kind: ``model`` (z_D a perturbation of z_∅ that lifts a
    few tokens, as a context does), ``random`` (independent streams), ``masked`` (EOS masked in
    both), ``degenerate`` (z_D = z_∅ but for one token), ``mixed`` (one row of each, plus one
    equal pair: the bound holds at λ_max)."""
    g = torch.Generator().manual_seed(seed)
    ze = torch.randn(rows, vocab, generator=g, dtype=torch.float64) * 2.5
    noise = torch.randn(rows, vocab, generator=g, dtype=torch.float64)
    if kind == "random":
        return noise * 2.5, ze
    zc = ze + 0.5 * noise
    zc[:, :3] += 6.0
    if kind == "masked":
        zc[:, -2:], ze[:, -2:] = MASKED_LOGIT, MASKED_LOGIT
    if kind == "degenerate":
        zc = ze.clone()
        zc[:, 1] += torch.linspace(-4.0, 4.0, rows, dtype=torch.float64)
    if kind == "mixed":
        zc[1], ze[2, -1], zc[2, -1] = noise[1] * 2.5, MASKED_LOGIT, MASKED_LOGIT
        zc[3] = ze[3]
        zc[4, 1:] = ze[4, 1:]
    return zc, ze


CASES = [  # (kind, rows, vocab, eps, lam_max, temperature)
    ("model", 4, 64, 0.5, 1.0, 0.8),
    ("model", 1, 1000, 2.0, 1.0, 1.0),
    ("model", 3, 1000, 8.0, 2.5, 0.7),       # λ_max > 1
    ("model", 2, 64, 0.0, 1.0, 1.0),         # ε = 0: λ_t = 0
    ("model", 2, 64, 1e3, 1.0, 1.0),         # the bound holds at λ_max
    ("random", 3, 64, 0.5, 1.0, 1.3),
    ("random", 2, 7, 2.0, 3.0, 0.5),         # λ_max > 1, a tiny vocabulary
    ("random", 2, 1000, 0.05, 0.4, 1.0),     # λ_max < 1
    ("masked", 3, 64, 0.3, 1.0, 1.0),
    ("masked", 2, 64, 2.0, 2.0, 1.7),
    ("degenerate", 5, 64, 0.5, 1.0, 0.8),    # one token apart, lifted or lowered
    ("degenerate", 5, 64, 2.0, 2.0, 1.0),
    ("mixed", 5, 64, 0.5, 1.0, 0.8),
    ("mixed", 5, 1000, 4.0, 1.5, 1.2),
]


@pytest.mark.parametrize("kind,rows,vocab,eps,lam_max,temperature", CASES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_the_search_finds_the_edge_bisection_finds(kind, rows, vocab, eps, lam_max,
                                                   temperature, dtype):
    """λ_t within 1e-12 of a 60-step bisection, and the divergence returned is the one at λ_t:
    within the bound (λ_t = 0 where ε/2 is below the margin)."""
    zc, ze = (z.to(dtype) for z in _rows(kind, rows, vocab, seed=rows * vocab))
    lams, divs = bounded_lambdas(zc, ze, eps, lam_max, temperature)
    want = _edge_by_bisection(zc, ze, eps, lam_max, temperature)
    assert max(abs(a - b) for a, b in zip(lams.tolist(), want)) <= 1e-12
    half = eps / 2 - BOUND_MARGIN
    base = torch.log_softmax(ze.double() / temperature, -1)
    valid = (zc > MASKED_LOGIT / 2) & (ze > MASKED_LOGIT / 2)
    gaps = (cid.cid_logprobs(zc, ze, lams, temperature) - base).abs().masked_fill(~valid, 0)
    assert torch.equal(gaps.amax(-1), divs)
    assert all(d <= half or (lam, d) == (0.0, 0.0) for lam, d in zip(lams.tolist(),
                                                                     divs.tolist()))


@pytest.mark.parametrize("seed", range(6))
def test_the_bound_holds_at_every_returned_lambda(seed):
    """Over many random rows, settings and scales, the divergence at the returned λ_t never
    exceeds ε/2 − margin: the bracket's low end is only ever a probe that kept the bound."""
    g = torch.Generator().manual_seed(seed)
    scale = [0.1, 1.0, 3.0, 10.0, 30.0, 3.0][seed]
    ze = torch.randn(16, 200, generator=g, dtype=torch.float64) * scale
    zc = ze + torch.randn(16, 200, generator=g, dtype=torch.float64) * scale * 0.3
    for eps in (1e-3, 0.1, 0.5, 2.0, 8.0):
        for lam_max in (0.5, 1.0, 3.0):
            for temperature in (0.3, 1.0, 1.5):
                lams, divs = bounded_lambdas(zc, ze, eps, lam_max, temperature)
                base = torch.log_softmax(ze / temperature, -1)
                gaps = (cid.cid_logprobs(zc, ze, lams, temperature) - base).abs().amax(-1)
                assert bool((gaps <= eps / 2 - BOUND_MARGIN).all())
                assert bool(((lams >= 0) & (lams <= lam_max)).all())


def _counted(monkeypatch):
    """Count the rows of every pass over the vocabulary (:func:`cid._probe`)."""
    seen = {"rows": 0}
    probe = cid._probe

    def counting(rows, *rest, **named):
        seen["rows"] += rows.zc.shape[0]
        return probe(rows, *rest, **named)

    monkeypatch.setattr(cid, "_probe", counting)
    return seen


@pytest.mark.parametrize("eps", [0.5, 2.0, 8.0])
def test_a_row_takes_a_handful_of_passes(monkeypatch, eps):
    """About 5 passes over the vocabulary per row where bisection took 41 (the one at λ_max
    included), on logits shaped like a model's: z_D a perturbation of z_∅."""
    seen = _counted(monkeypatch)
    zc, ze = _rows("model", 32, 4096, seed=7)
    lams, _ = bounded_lambdas(zc, ze, eps, 1.0, 0.8)
    assert bool((lams < 1.0).all())  # every row searched
    assert seen["rows"] / 32 <= 8


def test_edge_cases_cost_few_passes(monkeypatch):
    """Rows whose bound holds at λ_max cost one pass; ε/2 below the margin, or a context that
    masks most of the no-context mass (a jump at λ = 0+ past the bound), cost one pass too:
    λ_t = 0 without a search."""
    seen = _counted(monkeypatch)
    zc, ze = _rows("model", 4, 64, seed=3)
    assert bounded_lambdas(zc, ze, 1e3, 1.0, 1.0)[0].tolist() == [1.0] * 4
    assert bounded_lambdas(zc, ze, 0.0, 1.0, 1.0)[0].tolist() == [0.0] * 4
    ze[:, 0], zc[:, 0] = 20.0, MASKED_LOGIT  # the context rules out the no-context favourite
    lams, divs = bounded_lambdas(zc, ze, 0.5, 1.0, 1.0)
    assert lams.tolist() == [0.0] * 4 and divs.tolist() == [0.0] * 4
    assert lams.tolist() == _edge_by_bisection(zc, ze, 0.5, 1.0, 1.0)
    assert seen["rows"] == 12


def test_each_row_of_a_batch_is_its_own_search():
    """Rows converge after different numbers of passes; each row's λ_t and divergence are those
    of its one-row search, bit for bit (a NaN row included: λ_t = 0)."""
    zc, ze = _rows("mixed", 5, 40000, seed=11)  # long rows: a lone row's sums are split
    zc[0, 4] = math.nan
    lams, divs = bounded_lambdas(zc, ze, 0.5, 1.0, 0.8)
    for t in range(5):
        one = bounded_lambdas(zc[t:t + 1], ze[t:t + 1], 0.5, 1.0, 0.8)
        assert (lams[t].item(), divs[t].item()) == (one[0].item(), one[1].item())
    assert lams[0].item() == 0.0 and lams[3].item() == 1.0


def test_the_brackets_division_is_float64_tensor_division():
    """The search's bookkeeping divides Python floats as float64 tensors do: ±inf or NaN by a
    zero of either sign, where Python's ``/`` raises (a row whose slope is 0 at a probe)."""
    values = [0.0, -0.0, 1.5, -2.0, math.inf, -math.inf, math.nan, 1e-300, 1e300]
    for a in values:
        for b in values:
            want = (torch.tensor(a, dtype=torch.float64) / torch.tensor(b, dtype=torch.float64))
            got = cid._quotient(a, b)
            assert (math.isnan(got) and math.isnan(want.item())) or \
                (got == want.item() and math.copysign(1, got) == math.copysign(1, want.item())), \
                (a, b, got, want.item())


@pytest.mark.parametrize("lam_max", [0.3, 0.7, 1.0])
def test_the_search_does_not_depend_on_the_default_dtype(lam_max):
    """The bracket's arithmetic is float64 whatever ``torch.get_default_dtype()`` says: its
    nudge past the estimate (a quarter of the tolerance) was once a float32 tensor of Python
    scalars, which moved λ_t by ulps wherever λ_max · 2⁻⁴² is not a float32 number."""
    zc = torch.tensor([[4.0, 2.0, -1.0]], dtype=torch.float64)
    ze = torch.tensor([[0.0, -1.0, 2.0]], dtype=torch.float64)
    before = torch.get_default_dtype()
    found = []
    try:
        for dtype in (torch.float32, torch.float64):
            torch.set_default_dtype(dtype)
            found.append([t.tolist() for t in bounded_lambdas(zc, ze, 0.01, lam_max, 1.0)])
    finally:
        torch.set_default_dtype(before)
    assert found[0] == found[1]
    assert abs(found[0][0][0] - _edge_by_bisection(zc, ze, 0.01, lam_max, 1.0)[0]) < 1e-12
