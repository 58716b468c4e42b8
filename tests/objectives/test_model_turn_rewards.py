"""Rewards of env=conversation that ask a model: a local reward model on the whole session
(``session_reward_model``) and on each turn's prefix (``rm_prefix``), checked against the model's own logits on
the exact messages; the judge's per-turn rubric (``judge_rubric``) against a scripted 127.0.0.1 judge; and the
rollout's sessions per generate call, counted in the real rollout code."""

from __future__ import annotations

import itertools
import json

import pytest
from omegaconf import OmegaConf
from stub_endpoints import stub_judge

from rpbench.core.errors import ConfigError
from rpbench.data import readers
from rpbench.data.conversation_session import Session
from rpbench.data.readers import NoRubrics
from rpbench.models import chat_renderer, load
from rpbench.models.generation import default_stop_ids
from rpbench.objectives.conversation_env import ConversationEnv, ConversationEnvSettings
from rpbench.objectives.sampling import rollout_options
from rpbench.scoring.chat.client import open_client
from rpbench.scoring.judge.parties import rewarding_judges
from rpbench.validate import validate

SCENARIO = {
    "id": "train-ida-garden",
    "character": "Ida Brenn",
    "card": "Ida Brenn, a gardener in a walled town. She knows herbs and seasons.",
    "persona": "Jo, a new neighbour.",
    "goal": "Learn which herbs to plant in spring.",
    "opening": "Hello Ida, what should I plant?",
    "turns": 3,
}
RM_OVERRIDES = (
    "+env.turn_rewards.rm_prefix=1.0",
    "env.rewards=[{name: session_reward_model, weight: 2.0, kwargs: ${env.reward_model}}]",
)


@pytest.fixture
def scenario(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps(SCENARIO) + "\n")
    return readers.read("conversation", "train", path, NoRubrics(task_dimensions=None)).examples[0]


def env_config(composed, tmp_path, url: str, *overrides: str) -> ConversationEnvSettings:
    cfg = composed(
        tmp_path / "run",
        "objective=grpo",
        "env=conversation",
        *stub_judge(url),
        "judge.parse_tries=1",
        "env.max_turns=3",
        "env.simulator_checks=[]",  # the scripted sessions' short turns would fail them
        *overrides,
    )
    return ConversationEnvSettings.parse(OmegaConf.to_container(cfg.env, resolve=True), "env")


def played(scenario, turns: list[list[str]]) -> list[Session]:
    """Sessions with the given character replies, a user turn "More? (k)" after each but the last."""
    sessions = []
    for replies in turns:
        session = Session.start(scenario, 3)
        for k, text in enumerate(replies):
            session.add_reply(text)
            if k < len(replies) - 1:
                session.take_user_reply(f"More? ({k + 1})", None, k + 1, "[END]")
        sessions.append(session)
    return sessions


@pytest.fixture
def reward_model(tmp_path, save_tiny_reward_model):
    """A tiny random one-label Qwen2 sequence classifier with the tiny model's tokenizer, saved to a folder."""
    return save_tiny_reward_model(tmp_path / "rm")


def own_logit(folder, messages: list[dict]) -> float:
    """The classifier's logit on ``messages`` rendered alone (no batch, no padding)."""
    import torch
    from transformers import AutoTokenizer, Qwen2ForSequenceClassification

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = Qwen2ForSequenceClassification.from_pretrained(folder).eval()
    ids = tokenizer(tokenizer.apply_chat_template(messages, tokenize=False), add_special_tokens=False,
                    return_tensors="pt")  # fmt: skip
    with torch.no_grad():
        return model(**ids).logits[0, 0].item()


@pytest.mark.slow  # builds, saves and loads a tiny reward model
def test_the_reward_model_scores_the_whole_session_and_each_turns_prefix(
    tmp_path, scenario, reward_model, tiny_model, composed, chat_stub
):
    """Three sessions (3 turns, 2 turns ended by the user's stop marker, one cut short by the simulator): the
    session reward is the model's logit on the last reply after the whole session, each turn reward its logit on
    that reply after the session before it, the system prompt first; the session cut short gets neither."""
    sessions = played(scenario, [["Sage and thyme.", "In March.", "Water well."], ["Mint.", "Rue, I think."]])
    sessions[1].take_user_reply("Thanks! [END]", None, 2, "[END]")  # a farewell after the last reply
    cut = played(scenario, [["Hm."]])[0]
    cut.take_user_reply(None, "HTTP 503", 1, "[END]")
    sessions.append(cut)
    tokenizer = load(tiny_model())[1]
    with chat_stub(lambda body: "unused") as stub:
        settings = env_config(composed, tmp_path, stub.url, f"env.reward_model.path={reward_model}", *RM_OVERRIDES)
        env = ConversationEnv(settings, open_client, chat_renderer(tiny_model(), tokenizer, 1024))
        scores, rewards, scored = env.score(sessions)
        turns = env.score_turns(sessions)
        env.close()
        assert stub.requests == []  # no judge was asked
    system = {"role": "system", "content": scenario.prompt[0].content}
    assert "Ida Brenn" in system["content"] and SCENARIO["card"] in system["content"]
    expected_turns = []
    for session in sessions[:2]:
        messages, per_turn = [system, {"role": "user", "content": SCENARIO["opening"]}], []
        for k, reply in enumerate(session.replies):
            messages.append({"role": "assistant", "content": reply})
            per_turn.append(own_logit(reward_model, messages))
            messages.append({"role": "user", "content": f"More? ({k + 1})"})
        expected_turns.append(per_turn)
    whole = [t[-1] for t in expected_turns]  # the last reply after everything before it
    assert scores["session_reward_model"][:2] == pytest.approx(whole, abs=1e-4)
    assert scores["session_reward_model"][2] is None and scored.tolist() == [True, True, False]
    assert rewards[:2].tolist() == pytest.approx([2 * w for w in whole], abs=1e-4)
    assert turns.by_name["rm_prefix"][0] == pytest.approx(expected_turns[0], abs=1e-4)
    assert turns.by_name["rm_prefix"][1] == pytest.approx(expected_turns[1], abs=1e-4)
    assert turns.by_name["rm_prefix"][2] == [] and turns.combined[2] is None
    assert len({round(v, 6) for v in expected_turns[0]}) == 3  # the prefixes differ, and so do their scores


@pytest.mark.parametrize(
    ("overrides", "problem"),
    [
        (RM_OVERRIDES[:1], r"env.reward_model.path=None: expected the local folder"),
        (RM_OVERRIDES[1:], r"env.rewards\[0\].kwargs.path=None: expected the local folder"),
    ],
)
def test_a_reward_model_without_a_local_folder_is_refused_at_startup(tmp_path, composed, overrides, problem):
    cfg = composed(tmp_path / "run", "objective=grpo", "env=conversation", "data=sample_conversation",
                   "judge=local", *overrides)  # fmt: skip
    with pytest.raises(ConfigError, match=problem):
        validate(cfg)


RUBRIC_SCORES = {"Sage and thyme.": (5, 4, 3), "In March.": (2, 2, 2), "Mint.": (1, 5, 3)}


def turn_judge(body: dict) -> str:
    """Scores each reply by its text (the one after "turn k of Ida Brenn:"); "Rue." gets an unreadable reply."""
    text = body["messages"][-1]["content"]
    reply = text.split("The reply to judge, turn ", 1)[1].split("\n", 2)[1]
    if reply not in RUBRIC_SCORES:
        return "I cannot say."
    dims = ("in_character", "knowledge_boundary", "responsiveness")
    return "Here: " + json.dumps(dict(zip(dims, RUBRIC_SCORES[reply], strict=True)))


@pytest.mark.slow  # composes a run and loads a tokenizer
def test_the_turn_judge_scores_each_turn_and_a_missing_verdict_leaves_the_session_out(
    tmp_path, scenario, tiny_model, composed, chat_stub
):
    """One request per character turn, each showing the conversation before the turn and not after it; the value
    is the mean score mapped from 1-5 to [0, 1]; the session with an unreadable verdict has no turn rewards (not
    0) and the failure is counted."""
    sessions = played(scenario, [["Sage and thyme.", "In March."], ["Mint.", "Rue."]])
    tokenizer = load(tiny_model())[1]
    with chat_stub(turn_judge) as stub:
        settings = env_config(
            composed, tmp_path, stub.url, "env.rewards=[{name: non_empty, weight: 1.0}]",
            "+env.turn_rewards.judge_rubric=2.0", "env.allow_shared_judge=true",
        )  # fmt: skip
        env = ConversationEnv(settings, open_client, chat_renderer(tiny_model(), tokenizer, 1024))
        env.score(sessions)
        turns = env.score_turns(sessions)
        failures = env.turn_rewards.fns["judge_rubric"].failures
        env.close()
        prompts = [r["messages"][-1]["content"] for r in stub.requests]
    assert len(prompts) == 4
    first_turn_two = next(p for p in prompts if "turn 2 of Ida Brenn:\nIn March." in p)
    assert "[Turn 1] Ida Brenn: Sage and thyme." in first_turn_two and "User: More? (1)" in first_turn_two
    first_turn_one = next(p for p in prompts if "turn 1 of Ida Brenn:\nSage and thyme." in p)
    assert "More? (1)" not in first_turn_one and "In March." not in first_turn_one
    assert turns.by_name["judge_rubric"][0] == pytest.approx([(12 / 3 - 1) / 4, (2 - 1) / 4])
    assert turns.by_name["judge_rubric"][1] == [pytest.approx((3 - 1) / 4), None]
    assert turns.combined == [pytest.approx([1.5, 0.5]), None]
    assert failures == 1


def test_the_turn_judge_is_held_apart_from_the_user_simulator(tmp_path, composed):
    """With judge_rubric, env.judge rewards the policy: playing the user too needs env.allow_shared_judge."""
    cfg = composed(tmp_path / "run", "objective=grpo", "env=conversation", "data=sample_conversation",
                   "judge=openai", "judge.base_url=http://127.0.0.1:9/v1", "judge.api_key_env=null",
                   "env.rewards=[{name: non_empty, weight: 1.0}]", "+env.turn_rewards.judge_rubric=1.0",
                   "env.allow_shared_judge=false")  # fmt: skip
    with pytest.raises(ConfigError, match=r"the turn judge \(env.judge, env.turn_rewards.judge_rubric\)"):
        validate(cfg)


@pytest.mark.slow  # a tiny model plays six 2-turn sessions
def test_the_rollout_writes_a_turn_of_every_live_session_in_one_generate_call(
    tmp_path, scenario, tiny_model, composed, chat_stub
):
    """Two scenarios x three sessions, two turns each: two generate calls of six sessions; a session the user
    ends after turn 1 is not in the second call."""
    settings = tiny_model()
    model, tokenizer = load(settings)
    stop_ids = default_stop_ids(model, tokenizer)
    options = rollout_options(
        max_new_tokens=4, temperature=1.0, top_p=1.0, top_k=0, cache="dynamic", gather_per_batch=True
    )
    asked = itertools.count(1)

    def user(body: dict) -> str:
        return "Bye. [END]" if next(asked) == 7 else "Tell me more."  # the 7th request: one of turn 2's

    other = type(scenario)(scenario.id + "-2", scenario.prompt, scenario.reference, scenario.task, dict(scenario.meta))
    with chat_stub(user) as stub:
        env = ConversationEnv(
            env_config(composed, tmp_path, stub.url, "env.max_turns=3"), open_client,
            chat_renderer(settings, tokenizer, 2048),
        )  # fmt: skip
        _, sessions = env.play(model, [scenario, other], 3, options, stop_ids, tokenizer.pad_token_id, seed=3)
        env.close()
    assert env.sessions_per_generate == [6, 6, 5]
    assert sum(s.ended_by == "simulator" for s in sessions) == 1
    assert sorted(s.character_turns for s in sessions) == [2, 3, 3, 3, 3, 3]


@pytest.mark.parametrize("turn_rewards", [{"judge_rubric": 1.0}, {"ooc_count": -1.0}])
def test_the_turn_judge_is_recorded_as_a_judge_that_rewarded_training(turn_rewards):
    """A later evaluation reads the run's config.yaml: with judge_rubric, env.judge rewarded the policy."""
    judge = {"backend": "openai", "base_url": "http://judge.example/v1", "model": "judge-7b"}
    env = {"name": "conversation", "rewards": [{"name": "non_empty", "weight": 1.0}], "judge": judge}
    config = {"objective": {"name": "grpo"}, "env": {**env, "turn_rewards": turn_rewards}}
    found = rewarding_judges(config, None, "run a")
    assert [p.model for p in found] == (["judge-7b"] if "judge_rubric" in turn_rewards else [])
    if found:
        assert found[0].part == "the reward judge of run a (env.judge)"
