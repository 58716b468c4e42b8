"""The judge reply cache: what the key depends on, and persistence across connections."""

from __future__ import annotations

from rpbench.scoring.chat.cache import CachedReply, ReplyCache, cache_key
from rpbench.scoring.chat.endpoints import endpoint_identity

MESSAGES = [{"role": "user", "content": "Is this in character?"}]
SAMPLING = {"temperature": 0.0, "max_tokens": 4}


ENDPOINT = "http://127.0.0.1:8000/v1"


def test_key_changes_with_endpoint_model_version_messages_and_sampling():
    base = cache_key(ENDPOINT, "judge-a", "v1", MESSAGES, SAMPLING)
    same = cache_key(ENDPOINT, "judge-a", "v1", [dict(m) for m in MESSAGES], dict(reversed(SAMPLING.items())))
    assert base == same
    variants = [
        cache_key("http://127.0.0.1:8001/v1", "judge-a", "v1", MESSAGES, SAMPLING),
        cache_key(ENDPOINT, "judge-b", "v1", MESSAGES, SAMPLING),
        cache_key(ENDPOINT, "judge-a", "v2", MESSAGES, SAMPLING),
        cache_key(ENDPOINT, "judge-a", "v1", [{"role": "user", "content": "Is this in character ?"}], SAMPLING),
        cache_key(ENDPOINT, "judge-a", "v1", MESSAGES, {**SAMPLING, "temperature": 0.7}),
        cache_key(ENDPOINT, "judge-a", "v1", MESSAGES, {**SAMPLING, "max_tokens": 5}),
    ]
    assert len({base, *variants}) == 7


def test_endpoint_identity_ignores_case_and_a_trailing_slash_only():
    assert endpoint_identity("HTTP://Judge.Example:8000/v1/") == endpoint_identity("http://judge.example:8000/v1")
    assert endpoint_identity(None) == endpoint_identity("https://api.openai.com/v1")
    assert endpoint_identity("http://judge.example:8001/v1") != endpoint_identity("http://judge.example:8000/v1")


def test_replies_persist_across_connections(tmp_path):
    path = tmp_path / "sub" / "cache.sqlite"
    cache = ReplyCache(path)
    key = cache_key(ENDPOINT, "judge-a", "v1", MESSAGES, SAMPLING)
    assert cache.get(key) is None
    cache.put(key, "judge-a", "v1", CachedReply("1", 120, 1))
    cache.close()
    reopened = ReplyCache(path)
    assert reopened.get(key) == CachedReply("1", 120, 1)
    assert len(reopened) == 1
    reopened.close()
