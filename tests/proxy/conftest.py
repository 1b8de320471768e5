"""What the privacy proxy's tests share: the tiny in-process Llama-like model, one per module
(a module that needs another model, or its own, defines ``lm`` itself), and a tiny model served
by the fast tier's fake vLLM (:func:`helpers.proxy_server.served_tiny`). The rest of their
set-up is in :mod:`helpers.proxy_server`: the proxy served in a thread (``serving``,
``serving_sqlite``, ``audited`` for tests that send seeds), the documents and question most of
them mark (``DOCS``, ``QUESTION``), a chat body (``chat_body``) and the ``openai`` client
(``openai_client``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from helpers.proxy_server import served_tiny
from helpers.tiny_models import tiny_llama


@pytest.fixture(scope="module")
def lm() -> Any:
    return tiny_llama()


@pytest.fixture
def served(tmp_path: Any) -> Iterator[tuple[Any, Any]]:
    """The served tiny model and its fake vLLM server."""
    with served_tiny(tmp_path) as pair:
        yield pair
