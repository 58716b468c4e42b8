"""Every option of the Hydra group `judge` composes and yields a usable judge configuration."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from rpbench.scoring.chat.client import EndpointSettings
from rpbench.serve.settings import serve_settings

CONF_DIR = Path(__file__).resolve().parents[3] / "conf"
OPTIONS = sorted(p.stem for p in (CONF_DIR / "judge").glob("*.yaml"))


def judge_config(name: str, *overrides: str) -> dict:
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name=None, overrides=["+paths=default", f"+judge={name}", *overrides])
    return OmegaConf.to_container(cfg.judge, resolve=True)


def test_the_group_has_the_seven_options():
    assert OPTIONS == ["local", "mmrole_rm", "none", "openai", "replay", "rolemrc_published", "vllm"]


@pytest.mark.parametrize("name", [n for n in OPTIONS if n != "none"])
def test_option_builds_a_judge_config(name):
    cfg = judge_config(name, *(["judge.model=outputs/rm/model"] if name == "mmrole_rm" else []))
    config = EndpointSettings.parse(cfg, "judge")
    backend = {"openai": "openai", "rolemrc_published": "openai", "mmrole_rm": "local"}.get(name, name)
    assert cfg["backend"] == backend
    if name == "replay":  # replayed replies need no cache
        assert config.cache_path is None and config.replay_from.endswith("replies.jsonl")
        return
    assert config.cache_path.endswith("judge_cache.sqlite")
    if name == "local":
        serve = serve_settings(config.server.serve_options(), "judge.server")
        assert config.server.model == "tiny-qwen2" and config.api_key_env is None
        assert serve.max_batch_size == config.server.max_batch_size == 8


def test_published_rolemrc_setup():
    config = EndpointSettings.parse(judge_config("rolemrc_published"), "judge")
    assert (config.model, config.temperature) == ("gpt-4-turbo-2024-04-09", 0.7)
    assert config.base_url is None and config.api_key_env == "OPENAI_API_KEY"


def test_none_is_just_a_switch():
    assert judge_config("none") == {"backend": "none"}
