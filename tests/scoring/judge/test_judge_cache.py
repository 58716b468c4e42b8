"""The judge reply cache: what the key depends on, and persistence across connections."""

from __future__ import annotations

from rpbench.scoring.judge.cache import CachedReply, ReplyCache, cache_key

MESSAGES = [{"role": "user", "content": "Is this in character?"}]
SAMPLING = {"temperature": 0.0, "max_tokens": 4}


def test_key_changes_with_model_version_messages_and_sampling():
    base = cache_key("judge-a", "v1", MESSAGES, SAMPLING)
    assert base == cache_key("judge-a", "v1", [dict(m) for m in MESSAGES], dict(reversed(SAMPLING.items())))
    variants = [
        cache_key("judge-b", "v1", MESSAGES, SAMPLING),
        cache_key("judge-a", "v2", MESSAGES, SAMPLING),
        cache_key("judge-a", "v1", [{"role": "user", "content": "Is this in character ?"}], SAMPLING),
        cache_key("judge-a", "v1", MESSAGES, {**SAMPLING, "temperature": 0.7}),
        cache_key("judge-a", "v1", MESSAGES, {**SAMPLING, "max_tokens": 5}),
    ]
    assert len({base, *variants}) == 6


def test_replies_persist_across_connections(tmp_path):
    path = tmp_path / "sub" / "cache.sqlite"
    cache = ReplyCache(path)
    key = cache_key("judge-a", "v1", MESSAGES, SAMPLING)
    assert cache.get(key) is None
    cache.put(key, "judge-a", "v1", CachedReply("1", 120, 1))
    cache.close()
    reopened = ReplyCache(path)
    assert reopened.get(key) == CachedReply("1", 120, 1)
    assert len(reopened) == 1
    reopened.close()
