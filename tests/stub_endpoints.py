"""Overrides that point a run's judge at a test's stub endpoint (conftest's ``chat_stub``, a real server on
127.0.0.1): no API key, no reply cache, no progress bar."""

from __future__ import annotations


def stub_judge(url: str) -> tuple[str, ...]:
    """``judge=openai`` at ``url``, keyless, uncached and quiet."""
    return (
        "judge=openai",
        f"judge.base_url={url}",
        "judge.api_key_env=null",
        "judge.cache_path=null",
        "judge.progress=false",
    )
