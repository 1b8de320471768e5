"""Where a served model is (``--server-url``), how long its requests may take and how often a
failed one is sent again (``--request-timeout SECONDS``, ``--retries N``), checked before
anything is contacted (no
heavy imports here: the CLI checks them at start). They change how the client waits, never a
number it measures."""

from __future__ import annotations

import ipaddress
import math
import re
from contextlib import suppress
from typing import Any
from urllib.parse import urlsplit

from ctxleak.errors import ConfigError


def check_request_timeout(value: Any) -> float | None:
    """``None`` (the client's default, 600 s) or a finite number of seconds > 0."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"request_timeout must be a number of seconds > 0, not {value!r}",
                          param="request_timeout")
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"request_timeout must be a finite number of seconds > 0 (the "
                          f"longest one request to the server may take), not {value!r}",
                          param="request_timeout")
    return float(value)


def check_retries(value: Any) -> int | None:
    """``None`` (the client's default, 3 retries) or an integer ≥ 0: how many times a request
    that failed for a transient reason is sent again (0: tried once)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"retries must be an integer ≥ 0 (times a failed request is sent "
                          f"again; 0: tried once), not {value!r}", param="retries")
    return value


# one label of a host name: letters, digits, '-' and '_' (container names), not starting or
# ending with '-'; a name is at most 253 characters (RFC 1123 §2.1)
_HOST_LABEL = re.compile(r"(?!-)[\w-]{1,63}(?<!-)")


def normal_server_url(url: str) -> str:
    """``url`` with its scheme in lower case: URL schemes are case-insensitive (RFC 3986
    §3.1), so ``HTTP://host`` is ``http://host``."""
    if "://" not in url:
        return url
    scheme, rest = url.split("://", 1)
    return f"{scheme.lower()}://{rest}"


def _shown(url: str) -> str:
    """``url`` as the user gave it, with a password (if any) masked."""
    userinfo, at, _ = url.partition("://")[2].partition("/")[0].rpartition("@")
    if not at or ":" not in userinfo:
        return url
    return url.replace(f"{userinfo}@", f"{userinfo.split(':', 1)[0]}:***@", 1)


def _host_problem(host: str) -> str | None:
    """Why ``host`` (a URL's host, brackets removed) is not an IP address or a host name."""
    with suppress(ValueError):
        ipaddress.ip_address(host)
        return None
    name = host[:-1] if host.endswith(".") else host
    if len(name) > 253 or not all(_HOST_LABEL.fullmatch(part) for part in name.split(".")):
        return (f"its host '{host}' is neither an IP address nor a host name (letters, digits "
                "and '-' in dot-separated parts)")
    return None


def check_server_url(url: str | None) -> None:
    """A server URL is ``http(s)://host[:port][/path]`` (the scheme in any case), with a valid
    host and a port from 1 to 65535, and no credentials in it: they would be stored in
    ``config.json`` (the API key goes in CTXLEAK_API_KEY or OPENAI_API_KEY). Every error
    shows the URL as given."""
    if url is None:
        return
    text = str(url)
    shape = ("server_url must look like http://HOST:PORT (an OpenAI-compatible server's base "
             "URL), not '{url}': {why}")
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:  # a bad port or an unclosed IPv6 bracket
        reason = str(exc)
        if "Port" in reason:
            reason = "its port must be a number from 1 to 65535"
        elif "IPv6" in reason:
            reason = "an IPv6 host goes in brackets, e.g. http://[::1]:8000"
        raise ConfigError(shape.format(url=_shown(text), why=reason), param="server_url") \
            from None
    if parts.scheme.lower() not in ("http", "https"):
        raise ConfigError(shape.format(url=_shown(text), why="it must start with http:// or "
                                       "https://"), param="server_url")
    if parts.username is not None or parts.password is not None:
        raise ConfigError("server_url must not hold credentials (they would be written to the "
                          "run's config.json): put the API key in the environment variable "
                          "CTXLEAK_API_KEY (or OPENAI_API_KEY) instead", param="server_url")
    if not parts.hostname:
        raise ConfigError(shape.format(url=text, why="it names no host"), param="server_url")
    problem = _host_problem(parts.hostname)
    if problem:
        raise ConfigError(shape.format(url=text, why=problem), param="server_url")
    if port is not None and not 1 <= port <= 65535:
        raise ConfigError(shape.format(url=text, why=f"its port {port} is not from 1 to 65535"),
                          param="server_url")
