"""What :func:`ctxleak.engine.models.load_model` needs around ``from_pretrained``: a load
without transformers' "Loading weights" progress bars, and a quick check that the Hugging Face
Hub can be reached before a Hub id is fetched.

Without the check, an unreachable Hub costs about 48 s of retries before transformers' error;
with it a TCP connection to the endpoint is tried once (3 s at most) and the error says to set
``HF_HUB_OFFLINE=1`` for models already in the cache.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlparse

from huggingface_hub import constants
from huggingface_hub.utils import (
    are_progress_bars_disabled,
    disable_progress_bars,
    enable_progress_bars,
)
from transformers.utils import logging as hf_logging

from ctxleak.errors import ConfigError

#: Seconds to wait for a TCP connection to the Hub before calling it unreachable.
PROBE_TIMEOUT_S = 3.0


@contextmanager
def quiet_loading() -> Iterator[None]:
    """Within: no "Loading weights" or download progress bars from transformers and
    huggingface_hub; both are put back as they were after."""
    transformers_on = hf_logging.is_progress_bar_enabled()
    hub_on = not are_progress_bars_disabled()
    hf_logging.disable_progress_bar()
    disable_progress_bars()
    try:
        yield
    finally:
        if transformers_on:
            hf_logging.enable_progress_bar()
        if hub_on:
            enable_progress_bars()


def hub_endpoint() -> str:
    """The Hub's address: ``HF_ENDPOINT`` as set now, else huggingface_hub's."""
    return os.environ.get("HF_ENDPOINT") or constants.ENDPOINT


def hub_reachable(endpoint: str | None = None, timeout: float = PROBE_TIMEOUT_S) -> bool:
    """Whether a TCP connection to the Hub's host opens within ``timeout`` seconds."""
    url = urlparse(endpoint or hub_endpoint())
    host = url.hostname
    if not host:
        return False
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def unreachable_error(model_id: str, endpoint: str) -> ConfigError:
    """The one-line error for a Hub id not in the cache while the Hub cannot be reached."""
    return ConfigError(f"model '{model_id}' is not in the Hugging Face cache "
                       f"({constants.HF_HUB_CACHE}) and the Hub ({endpoint}) cannot be reached: "
                       "connect to the network, give a local model folder, or set "
                       "HF_HUB_OFFLINE=1 to use only cached models")
