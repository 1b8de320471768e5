"""A served run whose server dies gives a clear error and ``resume`` finishes it on a server
started again; a server that answers too slowly is a timeout, not a hang."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from helpers.vllm_server import start_server

import ctxleak
from ctxleak.engine.served import serve
from ctxleak.engine.served_client import ClientOptions, ServerError


@pytest.mark.served
@pytest.mark.integration
def test_server_killed_mid_run_then_resume(vllm_py, default_dir, tmp_path):
    """An influence run, one example per batch, on a server of its own: the server is killed
    (SIGKILL to its process group) once the first record is on disk. The run fails with an
    error that names the server and says how to finish it; a server started again (another
    port: the URL may change on resume) and ``resume=True`` finish the run, keeping the
    records written before the kill."""
    out = tmp_path / "run"
    samples = out / "samples.jsonl"
    kw = dict(temperature=1.0, ngram=32, limit=3, seed=0, max_new_tokens=24, batch_size="1",
              output=str(out), progress=False)
    first = start_server(default_dir, vllm_py)
    try:
        with ThreadPoolExecutor(1) as pool:
            running = pool.submit(ctxleak.influence, "default", "demo", server_url=first.url,
                                  served_model=first.served_name, **kw)
            deadline = time.monotonic() + 600
            while not (samples.is_file() and samples.read_text().strip()):
                assert not running.done(), f"the run ended before the kill: {running.result()}"
                assert time.monotonic() < deadline, "no record within 600 s"
                time.sleep(0.2)
            first.kill()
            with pytest.raises(ServerError) as err:
                running.result(timeout=600)
    finally:
        first.stop()
    message = str(err.value)
    assert first.url in message
    assert "--resume" in message
    kept = [json.loads(line) for line in samples.read_text().splitlines()]
    assert 1 <= len(kept) < 3

    second = start_server(default_dir, vllm_py)
    try:
        done = ctxleak.influence("default", "demo", server_url=second.url,
                                 served_model=second.served_name, resume=True, **kw)
    finally:
        second.stop()
    assert len(done.records) == 3
    on_disk = [json.loads(line) for line in samples.read_text().splitlines()]
    assert len(on_disk) == 3
    assert on_disk[:len(kept)] == kept  # the records before the kill are kept as written
    assert len({r["id"] for r in on_disk}) == 3
    assert json.loads((out / "results.json").read_text())["provenance"]["model"]["base_url"] \
        == second.url


class _Slow(BaseHTTPRequestHandler):
    """Answers ``GET /v1/models`` at once and every POST after ``delay`` seconds."""

    delay = 60.0

    def _json(self, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self._json({"object": "list", "data": [{"id": "slow", "max_model_len": 2048}]})

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        time.sleep(self.delay)
        try:
            self._json({"choices": []})
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up, as it should

    def log_message(self, *args) -> None:
        pass


@pytest.fixture()
def slow_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Slow)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.integration
def test_slow_server_times_out(slow_server):
    """Each request gives up after ``timeout`` seconds; after ``retries`` tries the error names
    the server and the timeout, long before the server would have answered."""
    options = ClientOptions(timeout=0.5, attempts=2, backoff_s=0.1)
    t0 = time.monotonic()
    with pytest.raises(ServerError) as err:
        serve("default", slow_server, options=options)
    took = time.monotonic() - t0
    message = str(err.value)
    assert slow_server in message
    assert "Timeout" in message
    assert "2 tries" in message
    assert took < _Slow.delay  # the client gave up; the server had not answered yet


def test_no_server_is_a_clear_error():
    """Nothing listens on the port: the error says so and what to do, after the retries."""
    from helpers.vllm_server import free_port

    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ServerError) as err:
        serve("default", url, options=ClientOptions(timeout=2, attempts=2, backoff_s=0.05))
    assert url in str(err.value)
    assert "is it still running" in str(err.value)


def test_default_dir_is_a_model_folder(default_dir):
    """What the server is started on: a Hugging Face folder with ``architectures`` and the
    tokenizer (a folder without ``architectures`` is served silently wrong)."""
    config = json.loads((Path(default_dir) / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert (Path(default_dir) / "tokenizer.json").is_file()
