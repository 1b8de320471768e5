"""``ctxleak serve``: the privacy proxy (:mod:`ctxleak.proxy`) with an OpenAI-compatible API, in
front of an upstream server. The command parses its flags, loads the model and calls
:func:`ctxleak.proxy.run_proxy`."""

from __future__ import annotations

import os
from typing import Optional

import typer

from ctxleak.errors import ConfigError


def _overrides(values: list[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for value in values:
        doc_id, sep, eps = value.rpartition("=")
        try:
            out[doc_id] = float(eps)
        except ValueError:
            sep = ""
        if not sep or not doc_id:
            raise ConfigError(f"--budget-for takes DOC_ID=EPSILON, not {value!r}",
                              param="budget_for")
    return out


def register(app: typer.Typer) -> None:
    """Add ``serve`` to ``app``."""

    @app.command("serve")
    def serve_cmd(
        upstream: Optional[str] = typer.Option(
            None, "--upstream", help="The OpenAI-compatible server (vLLM) behind the proxy, e.g. "
            "http://127.0.0.1:8000: requests without marked context are passed to it unchanged; "
            "with --decode upstream, CID decodes over it too."),
        model: str = typer.Option("default", "--model", "-m", help="The model CID decodes "
                                  "with: 'default', a Hugging Face id or a folder (served: the "
                                  "upstream model's name for its tokenizer)."),
        decode: str = typer.Option(
            "auto", "--decode", help="upstream: CID decodes inside the --upstream vLLM "
            "server, by ctxleak's CID plugin (one request per answer, batched with every "
            "other client's; docs/deploy-cid.md gives the server's flags). A server without "
            "the plugin is a slow fallback, said on the start line: the proxy then reads the "
            "whole next-token distributions itself (vLLM with --max-logprobs -1). "
            "in-process: load --model here; auto (default): upstream when --upstream is "
            "given."),
        served_model: Optional[str] = typer.Option(None, "--served-model", help="With --decode "
                                                   "upstream: the name the upstream serves the "
                                                   "model under (default: its only model)."),
        host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
        port: int = typer.Option(8100, "--port", help="Port to listen on."),
        budget: Optional[float] = typer.Option(None, "--budget", help="ε budget of every "
                                               "document, across requests (default: no limit; "
                                               "ε is still recorded). A budget B allows "
                                               "floor(B / (ε·(L+1))) answers of up to L tokens "
                                               "at ε per token (L+1: the stopping EOS); the "
                                               "start line gives the figures."),
        budget_for: list[str] = typer.Option([], "--budget-for", help="DOC_ID=EPSILON: one "
                                             "document's own budget (repeatable)."),
        class_budget: Optional[str] = typer.Option(
            None, "--class-budget", help="ε budget per document class, e.g. restricted=4,"
            "internal=16, for the classes --classes gives; class public is never charged. "
            "--budget-for wins over it, it over --budget."),
        classes: Optional[str] = typer.Option(
            None, "--classes", help="JSONL or CSV file of rows with id and class: each "
            "document's class (e.g. public, restricted), or demo-datastore (the bundled "
            "datastore's: common documents public, private ones restricted). Class public "
            "documents are in the prompt under every mechanism, never bounded or charged. "
            "Classes are the operator's: a request may repeat a document's class, but one that "
            "differs or that this file (or the ledger) does not hold is refused with HTTP 400."),
        public_top_k: int = typer.Option(
            2, "--public-top-k", help="With --datastore: the best this many public documents "
            "for the question (BM25 over the public documents alone) are put in every prompt; "
            "the mechanism answers over the private documents."),
        unguaranteed: str = typer.Option(
            "refuse", "--unguaranteed", help="What an answer without a DP guarantee that is "
            "not charged (plain CID's ctxleak.lambda without --charge-ex-post, scrubbing) may "
            "do with a document that has a budget: refuse (HTTP 403), drop it (answer "
            "without it), or use it uncharged (the budget is then only as strong as the "
            "clients' choice of ctxleak.epsilon)."),
        on_unfittable: str = typer.Option(
            "refuse", "--on-unfittable", help="A request whose reservation ε·(max_tokens+1) is "
            "more than a document's whole budget: refuse (HTTP 400 with the arithmetic) or drop "
            "(answer without it, with a warning in the response)."),
        ledger: str = typer.Option(
            "sqlite:///ctxleak-ledger.db", "--ledger", help="Where ε spent per document is "
            "kept: sqlite:///RELATIVE.db, sqlite:////ABSOLUTE.db or a plain path (one proxy), "
            "postgresql://... (replicas share it)."),
        on_exhausted: str = typer.Option("drop", "--on-exhausted", help="When a document's "
                                         "budget is spent: drop (answer without it, said in "
                                         "the response) or refuse (HTTP 429; a DP answer "
                                         "over --datastore always drops: a refusal would "
                                         "tell about one document)."),
        charge_ex_post: bool = typer.Option(False, "--charge-ex-post", help="Also charge plain "
                                            "CID's ex-post ε (data-dependent, not a guarantee) "
                                            "against the budgets (each such answer holds the "
                                            "document's remaining budget while it decodes)."),
        ex_post_reserve: Optional[float] = typer.Option(
            None, "--ex-post-reserve", help="With --charge-ex-post: reserve this ε per token "
            "(×(max_tokens+1)) instead of the whole remaining budget, so answers on one "
            "document run side by side; one whose ex-post ε passes it is charged in full."),
        accounting: str = typer.Option(
            "basic", "--accounting", help="How a document's answers compose into what it has "
            "spent: basic (ε adds up) or renyi (Rényi DP at one order, each budget ε holding at "
            "--budget-delta: many small steps, DP-RAG's or bounded CID's tokens, spend far "
            "less; not for the votes, whose steps have no Rényi curve)."),
        budget_delta: float = typer.Option(1e-6, "--budget-delta", help="With --accounting "
                                           "renyi: the δ at which each budget's ε holds."),
        renyi_order: Optional[float] = typer.Option(
            None, "--renyi-order", help="With --accounting renyi: the Rényi order the ledger "
            "keeps (default: the one at which the smallest budget holds the most answers of "
            "--mechanism; a ledger keeps its order for life)."),
        api_key_env: Optional[str] = typer.Option(None, "--api-key-env", help="Environment "
                                                  "variable holding the key clients must send "
                                                  "(Authorization: Bearer KEY)."),
        caller_keys: Optional[str] = typer.Option(
            None, "--caller-keys", help="JSONL or CSV file of rows with caller and key_env (the "
            "environment variable holding that caller's API key; or key, the key itself): "
            "each key is a caller, whose share and rate are its own. The --api-key-env key is "
            "caller default; without any key, every client is one caller, anonymous."),
        caller_header: Optional[str] = typer.Option(
            None, "--caller-header", help="A header (e.g. x-ctxleak-user) in which the "
            "operator's app, authenticated by its key, names its end user: the caller is then "
            "KEY'S-CALLER/VALUE (1 to 64 printable characters)."),
        caller_share: float = typer.Option(
            1.0, "--caller-share", help="The fraction in (0, 1] of each document's budget one "
            "caller may spend, e.g. 0.25 (default 1: no share limit); past it the caller is "
            "answered without the document, or HTTP 429 with --on-exhausted refuse."),
        caller_rate: Optional[float] = typer.Option(
            None, "--caller-rate", help="Requests a minute one caller may send (burst the "
            "same; each replica counts its own), e.g. 30; past it HTTP 429 with Retry-After "
            "(default: no limit)."),
        operator_key_env: Optional[str] = typer.Option(
            None, "--operator-key-env", help="Environment variable holding the operator's key "
            "(Authorization: Bearer KEY): the only key that reads the ledger's documents "
            "(/v1/ctxleak/documents) and /metrics's per-document series. Without it, those are "
            "refused (HTTP 403) where clients need --api-key-env, and open to anyone on a "
            "keyless proxy."),
        audit_seeds: bool = typer.Option(
            False, "--audit-seeds", help="For an audit only: use a client's seed for answers "
            "under a DP guarantee; each such answer says the seed is known and its guarantee "
            "void (seed_known). Without it a client's seed on such an answer is HTTP 400: the "
            "noise comes from a server secret."),
        allow_mechanism: list[str] = typer.Option(
            [], "--allow-mechanism", help="SPEC: a mechanism a request's ctxleak.mechanism may "
            "name (repeatable; --mechanism always may); any other is HTTP 400 "
            "mechanism_not_allowed. ctxleak.lambda / ctxleak.epsilon (CID) stay allowed."),
        allow_any_mechanism: bool = typer.Option(
            False, "--allow-any-mechanism", help="For research: a request may name any "
            "mechanism, still within --max-documents and --max-streams."),
        max_documents: int = typer.Option(64, "--max-documents", help="The most documents "
                                          "one request may give (HTTP 400 over_limit past "
                                          "it)."),
        max_streams: int = typer.Option(
            64, "--max-streams", help="The most prompt streams one answer decodes at once (a "
            "vote's voters plus its no-retrieval stream, DP-RAG's documents plus one): a "
            "request past it is HTTP 400 over_limit before anything is reserved or decoded; "
            "--mechanism past it is refused at start."),
        max_messages: int = typer.Option(
            256, "--max-messages", help="The most chat messages one request may send (HTTP 400 "
            "over_limit past it). A prompt whose tokens plus max_tokens pass the model's "
            "window is HTTP 413 prompt_too_long; both are checked before anything is "
            "reserved or decoded."),
        max_message_chars: int = typer.Option(
            65536, "--max-message-chars", help="The most characters one message's text may "
            "have (HTTP 413 message_too_long past it)."),
        upstream_key_env: Optional[str] = typer.Option(
            None, "--upstream-key-env", help="Environment variable holding the upstream's API "
            "key."),
        temperature: float = typer.Option(1.0, "--temperature", help="Temperature of a request "
                                          "that gives none."),
        max_tokens: int = typer.Option(64, "--max-tokens", help="New tokens of a request that "
                                       "gives no max_tokens."),
        max_tokens_limit: int = typer.Option(512, "--max-tokens-limit", help="The most new "
                                             "tokens a request may ask for."),
        max_concurrent: int = typer.Option(8, "--max-concurrent", help="Requests answered at "
                                           "once; more wait in arrival order (--max-queued)."),
        max_queued: int = typer.Option(32, "--max-queued", help="Requests that wait for a "
                                       "slot past --max-concurrent; more get HTTP 429."),
        max_body_bytes: int = typer.Option(1 << 20, "--max-body-bytes", help="Largest request "
                                           "body; larger get HTTP 413."),
        upstream_timeout: float = typer.Option(60.0, "--upstream-timeout", help="Seconds the "
                                               "upstream may take (then HTTP 504)."),
        body_timeout: float = typer.Option(30.0, "--body-timeout", help="Seconds a client may "
                                           "take to send its request body (then HTTP 408); a "
                                           "request counts against --max-concurrent only once "
                                           "its body is read."),
        worker_threads: Optional[int] = typer.Option(
            None, "--worker-threads", help="Worker threads for decoding and ledger calls "
            "(default 40)."),
        threads: Optional[int] = typer.Option(None, "--threads", help="CPU threads for torch "
                                              "in-process (default: torch's choice), as in "
                                              "every other command."),
        metrics_documents: int = typer.Option(20, "--metrics-documents", help="/metrics "
                                              "reports the remaining budget of this many "
                                              "documents, those with the least left."),
        datastore: Optional[str] = typer.Option(
            None, "--datastore", help="JSONL file of {id, text} documents (or demo-datastore) "
            "that --mechanism answers over, as its paper defines it: each DP voter retrieves "
            "from its own shard, DP-RAG retrieves privately. Every chat request is then "
            "answered over it (none is passed through) and charged to every private document "
            "of it."),
        prompt_messages: Optional[str] = typer.Option(
            None, "--prompt-messages", help="The app's chat prompt a mechanism's answer is "
            "decoded under: a JSON file of {role, content} messages with {context} and "
            "{query} slots, or a built-in name (short-answer); default: ctxleak's template."),
        # named as influence's --mechanism: the library's errors name "mechanisms"
        mechanisms: Optional[str] = typer.Option(
            None, "--mechanism", help="The defence that answers a request naming none "
            "(no ctxleak.lambda, ctxleak.epsilon or ctxleak.mechanism), e.g. dp-rag:eps=5, "
            "dp-vote:eps=2,shards=4, dp-sparse-vote:eps=2,shards=4, dp-ksa:eps=10,shards=32, "
            "scrub, "
            "cid:lam=0.5,bounded_eps=0.1: each answer reserves the mechanism's claim ε of "
            "every private document and is charged the ε its answer claims; a stream gets "
            "the finished answer in chunks."),
    ) -> None:
        """Serve an OpenAI-compatible privacy proxy: answers whose marked documents are decoded
        by Context Influence Decoding (ctxleak.lambda) or bounded CID (ctxleak.epsilon), or by
        another defence (--mechanism, ctxleak.mechanism: a DP vote, DP-RAG, scrubbing), with
        their privacy ledger and a per-document ε budget."""
        from ctxleak.engine.models import load_model
        from ctxleak.engine.served_client import public_url
        from ctxleak.methods.rag.app_prompt import load_prompt_messages
        from ctxleak.methods.rag.budgets import parse_budgets
        from ctxleak.mitigations.cid import cid_route
        from ctxleak.proxy import Budgets, ProxyConfig, run_proxy
        from ctxleak.proxy.answering import mechanism_text
        from ctxleak.proxy.budget import open_ledger, public_ledger_url
        from ctxleak.proxy.callers import read_caller_keys
        from ctxleak.proxy.held import sizing_text

        if not 0 <= port <= 65535:
            raise ConfigError(f"--port must be between 0 and 65535, not {port}", param="port")
        if decode not in ("auto", "in-process", "upstream"):
            raise ConfigError(f"--decode must be auto, in-process or upstream, not {decode!r}",
                              param="decode")
        if decode == "auto":
            decode = "upstream" if upstream is not None else "in-process"
        if decode == "upstream" and upstream is None:
            raise ConfigError("--decode upstream needs --upstream URL", param="upstream")
        api_key = None
        if api_key_env is not None:
            api_key = os.environ.get(api_key_env)
            if not api_key:
                raise ConfigError(f"--api-key-env {api_key_env}: that variable is not set",
                                  param="api_key_env")
        operator_key = None
        if operator_key_env is not None:
            operator_key = os.environ.get(operator_key_env)
            if not operator_key:
                raise ConfigError(f"--operator-key-env {operator_key_env}: that variable is "
                                  f"not set", param="operator_key_env")
        upstream_key = os.environ.get(upstream_key_env) if upstream_key_env else None
        config = ProxyConfig(upstream=upstream, upstream_api_key=upstream_key,
                             budgets=Budgets(default=budget, overrides=_overrides(budget_for),
                                             classes=parse_budgets(class_budget,
                                                                   "class_budget")),
                             on_exhausted=on_exhausted, on_unfittable=on_unfittable,
                             charge_ex_post=charge_ex_post, ex_post_reserve=ex_post_reserve,
                             unguaranteed=unguaranteed, accounting=accounting,
                             budget_delta=budget_delta, renyi_order=renyi_order,
                             classes=classes or {}, public_top_k=public_top_k,
                             temperature=temperature, max_tokens=max_tokens,
                             max_tokens_limit=max_tokens_limit, api_key=api_key,
                             caller_keys=read_caller_keys(caller_keys) if caller_keys else {},
                             caller_header=caller_header, caller_share=caller_share,
                             caller_rate=caller_rate,
                             max_body_bytes=max_body_bytes, max_concurrent=max_concurrent,
                             max_queued=max_queued,
                             upstream_timeout=upstream_timeout, body_timeout=body_timeout,
                             worker_threads=worker_threads,
                             metrics_documents=metrics_documents, mechanism=mechanisms,
                             audit_seeds=audit_seeds, operator_api_key=operator_key,
                             allowed_mechanisms=tuple(allow_mechanism),
                             allow_any_mechanism=allow_any_mechanism,
                             max_documents=max_documents, max_streams=max_streams,
                             max_messages=max_messages, max_message_chars=max_message_chars,
                             datastore=datastore,
                             prompt_messages=None if prompt_messages is None
                             else load_prompt_messages(prompt_messages, "prompt_messages"))
        if threads is not None:
            if threads < 1:
                raise ConfigError(f"--threads must be >= 1, not {threads}", param="threads")
            import torch

            torch.set_num_threads(threads)
        store = open_ledger(ledger)
        # through the upstream, each of CID's requests waits --upstream-timeout at most
        # (decoding through the upstream sends it --upstream-key-env's key, and no other: a
        # key the environment holds for another service never leaves the proxy)
        lm = load_model(model, server_url=upstream if decode == "upstream" else None,
                        served_model=served_model,
                        request_timeout=upstream_timeout if decode == "upstream" else None,
                        api_key_env=upstream_key_env, env_fallback=False)
        where = public_url(upstream) if upstream else "nothing"
        typer.echo(f"ctxleak serve: http://{host}:{port}/v1 (CID on {model}, {decode}; ledger "
                   f"{public_ledger_url(ledger)}; pass-through to {where})", err=True)
        if api_key is None and not config.caller_keys and host not in ("127.0.0.1", "localhost", "::1"):
            typer.echo(f"ctxleak serve: warning: listening on {host} without an API key: "
                       "anyone who reaches this address can spend the documents' budgets "
                       "(give --api-key-env)", err=True)
        if audit_seeds:
            typer.echo("ctxleak serve: warning: --audit-seeds: a client's seed fixes the noise "
                       "of its answer, whose DP guarantee is then void (said in each such "
                       "answer): for an audit, never for a deployment", err=True)
        typer.echo(f"ctxleak serve: {cid_route(lm)}", err=True)
        if config.mechanism is not None:
            typer.echo(f"ctxleak serve: {mechanism_text(config)}", err=True)
        typer.echo(f"ctxleak serve: {sizing_text(config.budgets, config.max_tokens)}", err=True)
        if config.composition.renyi:
            typer.echo(f"ctxleak serve: budgets compose in Rényi DP at order "
                       f"{config.composition.order:g}, each budget's ε holding at δ = "
                       f"{config.composition.delta:g} (the ledger's figures are Rényi "
                       f"divergences at that order; the counts above are basic composition's, "
                       f"a floor)", err=True)
        typer.echo(f"ctxleak serve: {config.limits_text()}", err=True)
        typer.echo(f"ctxleak serve: {config.callers_text()}", err=True)
        run_proxy(lm, host=host, port=port, ledger=store, config=config)
