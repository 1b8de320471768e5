"""What the privacy proxy's tests share: the tiny in-process Llama-like model, one per module
(a module that needs another model, or its own, defines ``lm`` itself), and a tiny model served
by the fast tier's fake vLLM (:func:`helpers.proxy_server.served_tiny`)."""

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
