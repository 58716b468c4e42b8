"""A hub model the run cannot reach is refused before the run starts, in one short request, saying why."""

from __future__ import annotations

import pytest

from rpbench.core.errors import ConfigError
from rpbench.validate import check_model_source, validate


@pytest.fixture
def online_hub(monkeypatch, tmp_path):
    """The Hub client online, with an empty cache."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)  # read once, at import (the tests set it to 1)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    return constants


def test_a_hub_that_cannot_be_reached_is_named_at_once(online_hub, monkeypatch, compose):
    monkeypatch.setattr(online_hub, "ENDPOINT", "http://127.0.0.1:9")  # nothing listens
    with pytest.raises(ConfigError, match=r"not in the Hugging Face cache, and the Hub .* cannot be reached .*offline"):
        check_model_source(validate(compose("model=qwen2.5-0.5b", "objective=none")))


def test_a_local_folder_a_tiny_model_and_a_cached_model_ask_the_hub_nothing(online_hub, monkeypatch, compose, tmp_path):
    monkeypatch.setattr(online_hub, "ENDPOINT", "http://127.0.0.1:9")  # nothing listens: a request would fail
    check_model_source(validate(compose("objective=none")))  # the default tiny model
    snapshot = tmp_path / "hub" / "models--Qwen--Qwen2.5-0.5B" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text("abc123")
    check_model_source(validate(compose("model=qwen2.5-0.5b", "objective=none")))
