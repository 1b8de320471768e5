"""The conformance check of what a mechanism's served answers carry: the mechanism behind
``ctxleak serve`` over a datastore (in this process, through the proxy's ASGI app), asked the
canary question as a client would. A DP answer's response (body and headers, the answer's own
text aside) names no document of the datastore, carries no document's text and no seed, and a
client's seed is refused: the noise is the server's secret."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from ctxleak.methods.attacks.canary import CANARY_QUERY
from ctxleak.mitigations.mechanisms import Mechanism, claim_of
from ctxleak.testing.bench import Bench, datastore_for, fail


def check_served_view(mechanism: Mechanism, bench: Bench) -> str:
    """Served over a datastore, an answer under a claim carries nothing the claim does not
    cover (module docstring)."""
    if claim_of(mechanism, bench.decoding).eps is None:
        return "no guarantee claimed: the operator's and client's views are the same"
    if not getattr(mechanism, "over_datastore", True):
        return "answers only from a request's documents: nothing of a datastore to carry"
    from fastapi.testclient import TestClient

    from ctxleak.proxy import ProxyConfig, create_app
    from ctxleak.proxy.budget import SQLiteLedger

    store = datastore_for(mechanism, with_canary=True)
    body: dict[str, Any] = {"model": "tiny", "messages": [{"role": "user",
                                                            "content": CANARY_QUERY}],
                            "temperature": bench.decoding.temperature,
                            "max_tokens": bench.decoding.max_new_tokens,
                            "min_tokens": bench.decoding.min_new_tokens}
    with tempfile.TemporaryDirectory() as folder:
        ledger = SQLiteLedger(Path(folder) / "ledger.db")
        try:
            app = create_app(bench.lm, ledger=ledger, config=ProxyConfig(
                mechanism=mechanism, datastore=store, allow_any_mechanism=True))
            with TestClient(app) as client:
                answers = [client.post("/v1/chat/completions", json=body) for _ in range(2)]
                seeded = client.post("/v1/chat/completions", json={**body, "seed": 7})
                streamed = client.post("/v1/chat/completions", json={**body, "stream": True})
        finally:
            ledger.close()
    for answer in (*answers, streamed):
        if answer.status_code != 200:
            raise fail(f"served over a datastore, an answer was HTTP {answer.status_code}: "
                        f"{answer.text[:200]}")
    if seeded.status_code != 400:
        raise fail(f"a client's seed was answered (HTTP {seeded.status_code}), not refused: "
                    f"the noise must be the server's secret")
    carried = [_without_text(a.json()) + json.dumps(dict(a.headers)) for a in answers]
    carried.append(_stream_without_text(streamed.text) + json.dumps(dict(streamed.headers)))
    for text in carried:
        for doc_id, doc_text in store.documents:
            if f'"{doc_id}"' in text or doc_text in text:
                raise fail(f"a served answer names or quotes the datastore's document "
                            f"{doc_id!r} outside its text")
        if '"seed"' in text:
            raise fail("a served answer carries its seed")
    return (f"2 answers and a stream over a datastore of {len(store.documents)} documents carry "
            f"none of them; a client's seed refused")


def _without_text(response: dict[str, Any]) -> str:
    """The response's JSON with each choice's text blanked (the answer may say anything)."""
    for choice in response.get("choices") or []:
        (choice.get("message") or {})["content"] = ""
    return json.dumps(response, ensure_ascii=False)


def _stream_without_text(text: str) -> str:
    """A stream's events with each chunk's text blanked."""
    out = []
    for line in text.splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            out.append(line)
            continue
        chunk = json.loads(line[len("data: "):])
        for choice in chunk.get("choices") or []:
            (choice.get("delta") or {})["content"] = ""
        out.append(json.dumps(chunk, ensure_ascii=False))
    return "\n".join(out)
