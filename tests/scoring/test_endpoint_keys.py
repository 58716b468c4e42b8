"""API keys reach an endpoint only when its config names their variable, and OpenAI's key reaches OpenAI alone:
the evaluation endpoint and the judge, composed as `python run.py` composes them, against a real HTTP stub on
127.0.0.1 that records the Authorization header of every request."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from rpbench.core.errors import ConfigError
from rpbench.data import readers
from rpbench.eval.evaluate import generate
from rpbench.scoring.chat.client import ChatRequest, EndpointConfigError, EndpointSettings, open_client
from rpbench.validate import validate

TEST_FILE = Path(__file__).resolve().parents[2] / "rpbench" / "resources" / "sample" / "rolemrc" / "test.jsonl"
OPENAI_SECRET = "sk-openai-test-not-a-real-key-91c2"
OTHER_SECRET = "endpoint-test-key-5d0e"
QUIET_JUDGE = ("judge.progress=false", "judge.cache_path=null")


@pytest.fixture
def openai_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_SECRET)
    monkeypatch.setenv("RPBENCH_TEST_ENDPOINT_KEY", OTHER_SECRET)


@pytest.fixture(scope="module")
def generate_against(data_options, chat_stub, evaluation_of):
    """The Authorization headers a stub endpoint received while the evaluator generated for two test records."""

    def generate_against(compose, tmp_path: Path, *overrides: str) -> list[str | None]:
        examples = readers.read("rolemrc", "test", TEST_FILE, data_options("sample")).examples[:2]
        with chat_stub(lambda body: "Hail.") as endpoint:
            cfg = compose(
                "objective=none",
                "evaluator.backend=endpoint",
                f"evaluator.endpoint.base_url={endpoint.url}",
                "evaluator.endpoint.model=served",
                *overrides,
            )
            generate(evaluation_of(cfg, tmp_path), examples, tmp_path / "predictions.jsonl")
        return endpoint.authorizations

    return generate_against


def test_the_evaluation_endpoint_gets_no_key_unless_its_config_names_one(
    compose, tmp_path, openai_key, generate_against
):
    assert generate_against(compose, tmp_path / "default") == ["Bearer EMPTY"] * 2
    named = generate_against(compose, tmp_path / "named", "evaluator.endpoint.api_key_env=RPBENCH_TEST_ENDPOINT_KEY")
    assert named == [f"Bearer {OTHER_SECRET}"] * 2


def test_openai_key_named_for_another_evaluation_endpoint_is_refused_before_any_request(
    compose, tmp_path, openai_key, generate_against
):
    with pytest.raises(ConfigError, match=r"evaluator.endpoint.api_key_env=OPENAI_API_KEY: http://127.0.0.1"):
        generate_against(compose, tmp_path, "evaluator.endpoint.api_key_env=OPENAI_API_KEY")


def ask_judge(judge_cfg) -> None:
    with open_client(EndpointSettings.parse(OmegaConf.to_container(judge_cfg, resolve=True), "judge")) as client:
        client.ask_many([ChatRequest(({"role": "user", "content": "In character?"},), 4, "test-v1")])


def test_the_openai_judge_pointed_at_another_host_is_refused_and_sends_nothing(compose, openai_key, chat_stub):
    with chat_stub(lambda body: "1") as endpoint:
        overrides = ["judge=openai", f"judge.base_url={endpoint.url}", "judge.cache_path=null"]
        cfg = compose("objective=none", "evaluator=rolemrc", *overrides)
        with pytest.raises(ConfigError, match=r"judge.api_key_env=OPENAI_API_KEY: http://127.0.0.1.* null"):
            validate(cfg)
        with pytest.raises(EndpointConfigError, match="not OpenAI's API"):
            ask_judge(cfg.judge)
        with pytest.MonkeyPatch.context() as env:  # the openai client's own redirection counts the same
            env.setenv("OPENAI_BASE_URL", endpoint.url)
            with pytest.raises(EndpointConfigError, match="not OpenAI's API"):
                ask_judge(compose("objective=none", "judge=openai", *QUIET_JUDGE).judge)
        keyless = compose("objective=none", *overrides, "judge.api_key_env=null", *QUIET_JUDGE)
        ask_judge(keyless.judge)
        vllm = compose("objective=none", "judge=vllm", f"judge.base_url={endpoint.url}", *QUIET_JUDGE)
        with pytest.MonkeyPatch.context() as env:
            env.setenv("VLLM_API_KEY", OTHER_SECRET)
            ask_judge(vllm.judge)
    assert endpoint.authorizations == ["Bearer EMPTY", f"Bearer {OTHER_SECRET}"]


def test_the_openai_judge_gets_the_openai_key(compose, openai_key, monkeypatch):
    """The client built for OpenAI's API carries its key (no request is made: the machine is offline)."""
    cfg = compose("objective=none", "judge=openai")
    judge = EndpointSettings.parse(OmegaConf.to_container(cfg.judge, resolve=True), "judge")
    with open_client(judge) as client:
        assert client._api_key == OPENAI_SECRET
    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(EndpointConfigError, match="OPENAI_API_KEY.*not set"):
        with open_client(judge):
            pass
