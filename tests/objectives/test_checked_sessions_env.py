"""env=conversation with checked simulators: a session whose simulated user copies its hidden goal fails
``goal_leak`` and gets no reward (not judged, zero advantage, outside its group's mean and std), counted in the
step's metrics; the other sessions of its group are normalised alone."""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf

from rpbench.data.conversation_session import Session
from rpbench.data.records import EvalExample, Turn
from rpbench.models import chat_renderer, load
from rpbench.objectives.conversation_env import ConversationEnv, ConversationEnvSettings, session_metrics
from rpbench.objectives.losses import group_advantages
from rpbench.scoring.chat.client import open_client

SCENARIO = {
    "character": "Ida Brenn",
    "card": "Ida Brenn, a gardener in a walled town. She knows herbs and seasons.",
    "persona": "Jo, a new neighbour.",
    "goal": "Learn which herbs to plant in spring.",
    "turns": 2,
}


@pytest.mark.slow
def test_a_session_failing_a_check_gets_no_reward_and_is_left_out_of_its_group(
    tmp_path, composed, chat_stub, tiny_model
):
    cfg = composed(tmp_path / "run", "objective=grpo", "env=conversation", "judge=openai")
    example = EvalExample(
        "ida", (Turn("system", "You are Ida."), Turn("user", "Hello Ida!")), "", "Ida Brenn", SCENARIO
    )
    user_turns = [
        "I want to learn which herbs to plant in spring, please.",  # 7 of the goal's words in a row: fails
        "What grows well by a sunny wall?",
        "Which herb smells the sweetest?",
        "Do you sell seeds here?",
    ]
    sessions = [Session.start(example, 5) for _ in user_turns]
    for session, (k, text) in zip(sessions, enumerate(user_turns)):
        session.add_reply("Plant sage.")
        session.take_user_reply(text, None, 1, "[END]")
        session.add_reply(f"Reply {k}.")
    verdicts = {"Reply 0.": 5, "Reply 1.": 5, "Reply 2.": 3, "Reply 3.": 1}

    def judge(body: dict) -> str:
        text = body["messages"][-1]["content"]
        score = next(v for reply, v in verdicts.items() if f": {reply}" in text)
        return json.dumps({"scores": dict.fromkeys(cfg.env.rubric, score), "breaks": []})

    tokenizer = load(tiny_model())[1]
    with chat_stub(judge) as stub:
        settings = OmegaConf.to_container(cfg.env, resolve=True)
        endpoint = {"base_url": stub.url, "api_key_env": None, "cache_path": None, "progress": False}
        settings["judge"] |= endpoint
        settings["rewards"][0]["kwargs"]["judge"] |= endpoint
        settings["simulator_checks"] = ["goal_leak", "double_user_turn"]
        env = ConversationEnv(
            ConversationEnvSettings.parse(settings, "env"), open_client, chat_renderer(tiny_model(), tokenizer, 1024)
        )
        scores, rewards, scored = env.score(sessions)
        env.close()
        judged = len(stub.requests)
    assert judged == 3 and sessions[0].failed_checks == ("goal_leak",)
    assert scores["session_judge"] == [None, 1.0, 0.5, 0.0] and scored.tolist() == [False, True, True, True]
    # the group's other three: mean 0.5, std 0.5 (Bessel); the failing session's advantage 0
    expected = [0.0, 0.5 / 0.5001, 0.0, -0.5 / 0.5001]
    assert group_advantages(rewards, 4, "group", scored=scored).tolist() == pytest.approx(expected, rel=1e-6)
    metrics = session_metrics(sessions)
    assert metrics["env/failed_check/goal_leak"] == 0.25 and metrics["env/failed_check/any"] == 0.25
    assert metrics["env/failed_check/role_reversal"] == 0.0
