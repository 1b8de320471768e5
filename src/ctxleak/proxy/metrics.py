"""The proxy's Prometheus metrics (``GET /metrics``, prometheus_client's text format), in a
registry of their own per app so that several apps in one process keep separate counts."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest


class ProxyMetrics:
    """Requests by route and status, released tokens, ε spent (guaranteed, and the ex-post
    figure of plain CID, which is not a guarantee) and documents dropped for their budget."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("ctxleak_proxy_requests", "Requests answered, by route and status",
                                ["route", "status"], registry=self.registry)
        self.tokens = Counter("ctxleak_proxy_tokens", "Tokens released by CID answers "
                              "(the stopping EOS included), by mode", ["mode"],
                              registry=self.registry)
        self.eps = Counter("ctxleak_proxy_epsilon_spent", "Guaranteed ε spent by bounded CID "
                           "answers, summed over answers and their documents",
                           registry=self.registry)
        self.eps_ex_post = Counter("ctxleak_proxy_epsilon_ex_post", "Ex-post ε of plain CID "
                                   "answers (data-dependent, not a guarantee), summed over answers "
                                   "and their documents", registry=self.registry)
        self.dropped = Counter("ctxleak_proxy_documents_dropped", "Documents left out of an "
                               "answer because their budget was spent", registry=self.registry)
        self.seconds = Histogram("ctxleak_proxy_request_seconds", "Seconds per request, by route",
                                 ["route"], registry=self.registry)

    def text(self) -> bytes:
        return generate_latest(self.registry)
