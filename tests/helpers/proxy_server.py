"""The privacy proxy (ctxleak.proxy) served by uvicorn on 127.0.0.1 in a thread, and a throwaway
PostgreSQL server (Debian's initdb/pg_ctl, on a unix socket in a temporary folder) for its
shared ledger."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import uvicorn

from ctxleak.proxy import ProxyConfig, create_app
from ctxleak.proxy.budget import BudgetLedger, SQLiteLedger

#: The documents most of the proxy's tests mark (a patient's record, a doctor's note) and the
#: question they ask about them.
DOCS = [{"id": "acct-7", "text": "the patient name is paris and the phone is one two three"},
        {"id": "acct-9", "text": "the doctor said the capital of italy is rome"}]
QUESTION = "what is the name of the patient ?"


def chat_body(marked: dict[str, Any] | None = None, question: str = QUESTION,
              **body: Any) -> dict[str, Any]:
    """A chat request to the proxy for model ``tiny``: one user message ``question``, the
    marked context ``marked`` (none: left out) and the other fields ``body``."""
    extra = {} if marked is None else {"ctxleak": marked}
    return {"model": "tiny", "messages": [{"role": "user", "content": question}], **extra,
            **body}


def openai_client(url: str, key: str = "none") -> Any:
    """The real ``openai`` client of the proxy at ``url``, without retries."""
    import openai

    return openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0)


@contextmanager
def serving(lm: Any, ledger: BudgetLedger, **config: Any) -> Iterator[tuple[str, Any]]:
    """The proxy on a free port: its base URL and the app (``app.state.proxy``)."""
    app = create_app(lm, ledger=ledger, config=ProxyConfig(**config))
    # IPPROTO_TCP named: asyncio sets TCP_NODELAY only on sockets whose proto says TCP (with
    # proto 0, Nagle's algorithm and delayed ACKs add 40 ms to every answer)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    # log_config None: uvicorn leaves the process's logging as it is. Its default dictConfig
    # closes every existing handler, and absl's (imported with rouge_score) closes its stream
    # when that is not the current sys.stderr: under capsys that stream was pytest's own
    # capture file, and every later test of the process failed on it
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on",
                                           log_config=None))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started and thread.is_alive():
        threading.Event().wait(0.005)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", app
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


@contextmanager
def serving_sqlite(lm: Any, path: Path, **config: Any
                   ) -> Iterator[tuple[str, SQLiteLedger, Any]]:
    """:func:`serving` on a SQLite ledger at ``path`` (closed after): URL, ledger and app."""
    ledger = SQLiteLedger(path)
    try:
        with serving(lm, ledger, **config) as (url, app):
            yield url, ledger, app
    finally:
        ledger.close()


@contextmanager
def audited(lm: Any, tmp_path: Path, **config: Any
            ) -> Iterator[tuple[str, SQLiteLedger, Any]]:
    """:func:`serving_sqlite` on ``tmp_path / "ledger.db"``, serving as an audit
    (``audit_seeds``, unless ``config`` says otherwise): tests that compare a served answer
    with the mechanism's in-process one under one seed, or repeat an answer by its seed, send
    seeds, and a client's seed is refused for a DP answer unless the operator audits."""
    config.setdefault("audit_seeds", True)
    with serving_sqlite(lm, tmp_path / "ledger.db", **config) as served:
        yield served


@contextmanager
def served_tiny(tmp_path: Path, server: Any = None) -> Iterator[tuple[Any, Any]]:
    """A tiny model served by the fast tier's fake vLLM (``server``: its class or factory,
    default :func:`helpers.fake_server.fake_vllm`), whose vocabulary is its tokenizer's as a
    served model's is: the served model (no plausibility probe: it is random) and the server."""
    from ctxleak.engine.served import serve
    from helpers.fake_server import fake_vllm
    from helpers.tiny_models import tiny_llama

    tiny = tiny_llama(seed=3, vocab_extra=0)
    tok_dir = tmp_path / "tok"
    tiny.tokenizer.save_pretrained(tok_dir)
    with (server or fake_vllm)(tiny, never=(0, 1, 3)) as upstream:
        yield serve("tiny", upstream.url, tokenizer=str(tok_dir), check=False), upstream


def _as_owner(cmd: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root: run its tools as ``nobody`` there."""
    if os.geteuid() != 0:
        return cmd
    return ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", *cmd]


def postgres_tools() -> str | None:
    """Why a PostgreSQL server cannot be started here (None: it can)."""
    missing = [t for t in ("initdb", "pg_ctl") if shutil.which(t) is None]
    if missing:
        return f"{', '.join(missing)} not on PATH (Debian's postgresql package)"
    if os.geteuid() == 0 and shutil.which("setpriv") is None:
        return "running as root without setpriv to drop to an unprivileged user"
    return None


def _run(cmd: list[str]) -> None:
    done = subprocess.run(_as_owner(cmd), capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr.strip()}")


@contextmanager
def postgres() -> Iterator[str]:
    """A fresh PostgreSQL server listening only on a unix socket in a new folder under the
    system's temporary folder (short, and reachable by an unprivileged owner); yields its
    ``postgresql://`` URL, then stops it and removes the folder."""
    folder = Path(tempfile.mkdtemp(prefix="ctxleak-pg-"))
    try:
        if os.geteuid() == 0:
            shutil.chown(folder, "nobody")
        data = folder / "data"
        _run(["initdb", "-D", str(data), "-A", "trust", "-U", "ctxleak"])
        options = f"-k {folder} -c listen_addresses='' -c fsync=off"
        _run(["pg_ctl", "-D", str(data), "-o", options, "-l", str(folder / "log"), "-w",
              "start"])
        try:
            yield f"postgresql://ctxleak@/postgres?host={folder}"
        finally:
            _run(["pg_ctl", "-D", str(data), "-m", "immediate", "-w", "stop"])
    finally:
        shutil.rmtree(folder, ignore_errors=True)
