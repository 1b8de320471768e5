"""Broken variants of the DP mechanisms, for tests only: each subclass's noisy step adds no
noise, so an audit must catch it ("Auditing Differentially Private Machine Learning: How Private
is Private SGD?"). DPVoteRAG and DPSparseVoteRAG: Koga, Wu and Chaudhuri, "Privacy-Preserving
Retrieval-Augmented Generation with Differential Privacy" (and the answer vote, their step over
whole answers); DP-RAG: Grislain, "RAG with Differential Privacy"; DP-KSA: Tang, Flemings, Wang
and Annavaram, "Differentially Private Retrieval-Augmented Generation". Each keeps its honest
parent's claim."""

from __future__ import annotations

import math

import torch

from ctxleak.mitigations.dp_answer_vote import DPAnswerVote
from ctxleak.mitigations.dp_ksa import DPKSA
from ctxleak.mitigations.dp_rag import DPRAG
from ctxleak.mitigations.dp_vote import DPSparseVote, DPVote


class NoNoiseVote(DPVote):
    """Broken: the plurality released as is (no Gumbel noise, no threshold)."""

    def release(self, counts, scale, gap, generator):
        return int(torch.argmax(counts))


class NoNoiseSparseVote(DPSparseVote):
    """Broken: neither the sparse-vector test nor the vote adds noise."""

    def release(self, counts, scale, gap, generator):
        return int(torch.argmax(counts))

    def pays(self, agree, eps_svt, generator, rho):
        return agree < self.threshold * self.shards


class NoNoiseDPRAG(DPRAG):
    """Broken: the documents' most likely token, no exponential mechanism."""

    def step_logprobs(self, doc_logits, empty_logits, eps_token, temperature, excluded):
        z = torch.log_softmax(doc_logits.double(), dim=-1).sum(dim=0)
        if excluded:
            z[list(excluded)] = -math.inf
        out = torch.full_like(z, -math.inf)
        out[int(torch.argmax(z))] = 0.0
        return out


class NoNoiseKSA(DPKSA):
    """Broken: the voters' top keywords released whatever their gap (no noisy test)."""

    def test(self, distance, generator):
        return True


class NoNoiseAnswerVote(DPAnswerVote):
    """Broken: the most frequent answer released as is (no Gumbel noise, no threshold)."""

    def release(self, counts, scale, gap, generator):
        return int(torch.argmax(counts))
