"""Who answers at an OpenAI-compatible endpoint, and which API key (if any) it is sent.

A key is sent only when the endpoint's config names its environment variable (``api_key_env``); otherwise a
placeholder goes (local servers expect one). OpenAI's key (``OPENAI_API_KEY``) goes to OpenAI's API alone:
another host that should get a key names its own variable.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

from rpbench.core.errors import ConfigError

OPENAI_BASE_URL = "https://api.openai.com/v1"
OPENAI_KEY_ENV = "OPENAI_API_KEY"
PLACEHOLDER_KEY = "EMPTY"


def client_base_url(base_url: str | None) -> str:
    """Where the ``openai`` client sends a request configured with ``base_url`` (None: OPENAI_BASE_URL or
    OpenAI's API)."""
    return base_url or os.environ.get("OPENAI_BASE_URL") or OPENAI_BASE_URL


def is_openai_api(base_url: str | None) -> bool:
    """Whether requests configured with ``base_url`` go to OpenAI's API over https."""
    parts = urlsplit(client_base_url(base_url))
    return parts.scheme == "https" and parts.hostname == "api.openai.com"


def endpoint_identity(base_url: str | None) -> str:
    """The endpoint as judge caches key it: the URL with scheme and host lowercased, no trailing slash."""
    parts = urlsplit(client_base_url(base_url))
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}{parts.path.rstrip('/')}"


def api_key(base_url: str | None, api_key_env: str | None, setting: str) -> str:
    """The key to send to ``base_url``: the value of ``api_key_env``, or the placeholder when it names no
    variable or the variable is unset. ``setting`` names the config key in the errors; OpenAI's API without a
    key, or OpenAI's key named for another host, is a ConfigError."""
    if api_key_env == OPENAI_KEY_ENV and not is_openai_api(base_url):
        raise ConfigError(
            f"{setting}={api_key_env}: {client_base_url(base_url)} is not OpenAI's API, and OpenAI's key goes to "
            f"OpenAI alone: set {setting} to the variable holding this endpoint's key, or null when it needs none"
        )
    value = os.environ.get(api_key_env) if api_key_env else None
    if value:
        return value
    if is_openai_api(base_url):
        raise ConfigError(
            f"{setting}={api_key_env!r}: OpenAI's API needs a key in that environment variable, which is not set"
        )
    return PLACEHOLDER_KEY
