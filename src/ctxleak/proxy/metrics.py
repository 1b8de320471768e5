"""The proxy's Prometheus metrics (``GET /metrics``, prometheus_client's text format), in a
registry of their own per app so that several apps in one process keep separate counts.

What an operator alerts on: the remaining budget of the documents closest to exhaustion (one
gauge per document for the ``lowest`` documents only, so that a ledger of a million documents
gives a bounded scrape, plus the count of documents), exhaustion events, and request latency
per route; per caller (labelled by the key's caller name only, so as many labels as the
operator has keys, whatever end users an app names): requests, rate-limited requests and
documents refused for the caller's share, beside the configured share and rate. The budget
gauges are read from the ledger at each scrape, so every replica on a
shared ledger reports the same figures."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ctxleak.proxy.budget import BudgetLedger


class LedgerGauges(Collector):
    """At each scrape: ``ctxleak_proxy_budget_remaining{document}`` (ε left, budget − spent,
    open reservations counted as spent) and ``ctxleak_proxy_budget_used_fraction{document}``
    (spent / budget, what the shipped alert rules read, whatever the budgets' sizes) of the
    ``lowest`` documents with a budget, and ``ctxleak_proxy_ledger_documents`` (documents in
    the ledger)."""

    def __init__(self, ledger: BudgetLedger, lowest: int) -> None:
        self.ledger, self.lowest = ledger, lowest

    def collect(self) -> Iterator[Any]:
        remaining = GaugeMetricFamily(
            "ctxleak_proxy_budget_remaining", f"ε left (budget − spent, open reservations "
            f"included) of the {self.lowest} documents with the least left",
            labels=["document"])
        used = GaugeMetricFamily(
            "ctxleak_proxy_budget_used_fraction", f"Fraction of its budget spent (open "
            f"reservations included) of the {self.lowest} documents with the least left",
            labels=["document"])
        for row in self.ledger.lowest_remaining(self.lowest) if self.lowest else []:
            remaining.add_metric([row.doc_id], float(row.remaining or 0.0))
            if row.budget:
                used.add_metric([row.doc_id], float(row.spent) / float(row.budget))
        yield remaining
        yield used
        yield GaugeMetricFamily("ctxleak_proxy_ledger_documents", "Documents in the ledger",
                                value=self.ledger.count())


class ProxyMetrics:
    """Requests by route and status, their seconds by route and released tokens (``registry``,
    anyone's); and the operator's series counted over documents (``documents``): ε spent
    (guaranteed, and the ex-post figure of plain CID, which is not a guarantee), documents
    dropped for their budget, exhaustion events, the callers' figures (their share of each
    document's budget, ``share``, and requests a minute, ``rate``: None is +Inf, no limit) and,
    with a ledger, its budget gauges. Those that name documents or count them (over a
    datastore: its size) only the operator reads (:meth:`text`)."""

    def __init__(self, ledger: BudgetLedger | None = None, lowest: int = 20, *,
                 share: float = 1.0, rate: float | None = None) -> None:
        self.registry = CollectorRegistry()
        self.documents = CollectorRegistry()
        self.requests = Counter("ctxleak_proxy_requests", "Requests answered, by route and status",
                                ["route", "status"], registry=self.registry)
        self.tokens = Counter("ctxleak_proxy_tokens", "Tokens released by CID answers "
                              "(the stopping EOS included), by mode", ["mode"],
                              registry=self.registry)
        self.eps = Counter("ctxleak_proxy_epsilon_spent", "Guaranteed ε spent by bounded CID "
                           "answers, summed over answers and their documents",
                           registry=self.documents)
        self.eps_ex_post = Counter("ctxleak_proxy_epsilon_ex_post", "Ex-post ε of plain CID "
                                   "answers (data-dependent, not a guarantee), summed over answers "
                                   "and their documents", registry=self.documents)
        self.dropped = Counter("ctxleak_proxy_documents_dropped", "Documents left out of an "
                               "answer because their budget was spent", registry=self.documents)
        self.exhausted = Counter("ctxleak_proxy_budget_exhausted", "Exhaustion events: a "
                                 "document whose budget could not cover an answer's "
                                 "reservation, by what the proxy did (drop, refuse)",
                                 ["action"], registry=self.documents)
        self.seconds = Histogram("ctxleak_proxy_request_seconds", "Seconds per request, by route",
                                 ["route"], registry=self.registry)
        Gauge("ctxleak_proxy_caller_share", "The fraction of each document's budget one "
              "caller may spend (1: no share limit)", registry=self.registry).set(share)
        Gauge("ctxleak_proxy_caller_rate", "Requests a minute one caller may send to this "
              "replica (+Inf: no limit)", registry=self.registry
              ).set(float("inf") if rate is None else rate)
        self.caller_requests = Counter("ctxleak_proxy_caller_requests", "Chat requests by "
                                       "caller (its key's name)", ["caller"],
                                       registry=self.registry)
        self.rate_limited = Counter("ctxleak_proxy_caller_rate_limited", "Chat requests "
                                    "refused for the caller's rate (HTTP 429), by caller",
                                    ["caller"], registry=self.registry)
        self.share_spent = Counter("ctxleak_proxy_caller_share_spent", "Documents left out "
                                   "of (or refusing) an answer because the caller's share of "
                                   "their budget is spent, by caller", ["caller"],
                                   registry=self.registry)
        if ledger is not None:
            self.documents.register(LedgerGauges(ledger, lowest))

    def text(self, operator: bool = True) -> bytes:
        """The Prometheus text: every series for the operator, else only those that count no
        document."""
        public = generate_latest(self.registry)
        return public + generate_latest(self.documents) if operator else public
