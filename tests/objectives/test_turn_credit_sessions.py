"""Per-turn credit on played sessions: each turn's advantage reaches exactly that turn's tokens, on three chat
templates, with the pad token equal to the end of turn; the session judge's flagged turns as a turn reward."""

from __future__ import annotations

import csv
import json
import math

import pytest
import torch
from lightning.pytorch.loggers import CSVLogger
from omegaconf import OmegaConf
from stub_endpoints import stub_judge

from rpbench.data import readers
from rpbench.data.chat import IGNORE_INDEX
from rpbench.data.conversation_session import Session
from rpbench.data.readers import NoRubrics
from rpbench.models import chat_renderer, load
from rpbench.models.generation import decode_completion, default_stop_ids
from rpbench.objectives.conversation_env import ConversationEnv, ConversationEnvSettings
from rpbench.objectives.grpo import completion_batch
from rpbench.objectives.sampling import rollout_options
from rpbench.objectives.turn_credit.rewards import TURN_REWARDS
from rpbench.objectives.turn_credit.tokens import token_advantages
from rpbench.scoring.chat.client import open_client
from rpbench.scoring.rewards import REWARDS
from rpbench.training import train
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
DIMENSIONS = ("character_consistency", "persona_drift", "knowledge_boundary", "out_of_character", "engagement")


@pytest.fixture
def scenario(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps(SCENARIO) + "\n")
    return readers.read("conversation", "train", path, NoRubrics(task_dimensions=None)).examples[0]


def env_settings(cfg, url: str, *overrides: tuple[str, object]) -> ConversationEnvSettings:
    settings = OmegaConf.to_container(cfg.env, resolve=True)
    endpoint = {"base_url": url, "api_key_env": None, "cache_path": None, "progress": False, "parse_tries": 1}
    settings["judge"] |= endpoint
    settings["rewards"][0]["kwargs"]["judge"] |= endpoint
    for key, value in overrides:
        settings[key] = value
    return ConversationEnvSettings.parse(settings, "env")


def labelled_runs(ids: list[int], labels: list[int]) -> list[list[int]]:
    runs, current = [], []
    for token, label in zip(ids, labels, strict=True):
        if label == IGNORE_INDEX:
            runs, current = runs + [current] if current else runs, []
            continue
        current.append(token)
    return runs + [current] if current else runs


@pytest.mark.slow  # a tiny model plays three 3-turn sessions per template
@pytest.mark.parametrize("family", ["qwen2", "llama", "gemma2"])
def test_each_turns_advantage_reaches_exactly_its_tokens_with_pad_equal_to_the_end_of_turn(
    family, tmp_path, scenario, tiny_model, composed, chat_stub
):
    """The end-of-turn token is made likely (a logit bias of ln V) so turns end on it, and it is also the pad
    token (TRL issue 4974's pattern): every labelled run is one character turn in order, decodes to that reply,
    keeps the end of turn it sampled, and each of its tokens carries that turn's advantage (10 * row + turn)."""
    cfg = composed(
        tmp_path / "run",
        "objective=grpo",
        "env=conversation",
        "judge=openai",
        "env.max_turns=3",
        "env.simulator_checks=[]",  # the scripted sessions' one-word turns would fail them (test_checked_*)
    )
    settings = tiny_model(family)
    model, tokenizer = load(settings)
    renderer = chat_renderer(settings, tokenizer, 2048)
    (end_of_turn,) = renderer.content.encode(renderer.end_of_turn)
    vocab = model.get_output_embeddings().weight.shape[0]
    bias = torch.zeros(vocab)
    bias[end_of_turn] = math.log(vocab)
    model.get_output_embeddings().register_forward_hook(lambda module, args, out: out + bias.to(out.dtype))
    stop_ids = default_stop_ids(model, tokenizer)
    assert end_of_turn in stop_ids
    options = rollout_options(
        max_new_tokens=5, temperature=1.0, top_p=1.0, top_k=0, cache="dynamic", gather_per_batch=True
    )
    with chat_stub(lambda body: "Tell me more.") as stub:
        env = ConversationEnv(env_settings(cfg, stub.url), open_client, renderer)
        rollouts, sessions = env.play(model, [scenario], 3, options, stop_ids, end_of_turn, seed=11)
        env.close()
    per_turn = torch.tensor([[10.0 * i + t for t in range(3)] for i in range(3)])
    advantages = token_advantages(per_turn, rollouts.policy_turns)
    batch = completion_batch(rollouts, [0, 1, 2], end_of_turn)
    ended_on_eot = 0
    for row, session in enumerate(sessions):
        assert session.character_turns == 3
        n = int(batch["attention_mask"][row].sum())
        runs = labelled_runs(batch["input_ids"][row, :n].tolist(), batch["labels"][row, :n].tolist())
        assert len(runs) == 3 and sum(map(len, runs)) == rollouts.policy_lengths[row]
        assert [decode_completion(tokenizer, run, stop_ids) for run in runs] == session.replies
        expected = [10.0 * row + turn for turn, run in enumerate(runs) for _ in run]
        assert advantages[row, : len(expected)].tolist() == expected
        assert advantages[row, len(expected) :].abs().sum() == 0
        for run in runs:
            assert end_of_turn not in run[:-1]  # a turn stops at its first end of turn
            ended_on_eot += run[-1] == end_of_turn
    assert ended_on_eot >= 3  # turns do end on the token that pads


@pytest.mark.slow  # composes a run and loads a tokenizer
def test_the_judges_flagged_turns_are_a_turn_reward_beside_the_session_reward(
    tmp_path, scenario, tiny_model, composed, chat_stub
):
    """Three 3-turn sessions judged 5, 3 and unreadable; the first flagged at turns 2 and 7 (7 is out of range),
    the second at none. judge_breaks (weight -1) and ooc_count (weight -0.5) per turn; the unreadable session
    and the one cut short by the simulator have no turn rewards."""
    cfg = composed(
        tmp_path / "run",
        "objective=grpo",
        "env=conversation",
        "judge=openai",
        "env.max_turns=3",
        "env.simulator_checks=[]",  # the scripted sessions' one-word turns would fail them (test_checked_*)
    )
    replies = [["Sage.", "As an AI, mint.", "Rue."], ["Thyme.", "Dill.", "Basil, language model."], ["a", "b", "c"]]
    sessions = [Session.start(scenario, 3) for _ in range(4)]
    for session, texts in zip(sessions[:3], replies, strict=True):
        for k, text in enumerate(texts):
            session.add_reply(text)
            if k < 2:
                session.take_user_reply("More?", None, k + 1, "[END]")
    sessions[3].add_reply("Hm.")
    sessions[3].take_user_reply(None, "HTTP 503", 1, "[END]")
    verdicts = {"Sage.": (5, [2, 7]), "Thyme.": (3, [])}

    def judge(body: dict) -> str:
        text = body["messages"][-1]["content"]
        found = next((v for reply, v in verdicts.items() if reply in text), None)
        if found is None:
            return "no verdict"
        return json.dumps(
            {
                "scores": dict.fromkeys(DIMENSIONS + ("goal_progress",), found[0]),
                "breaks": [{"turn": t, "reason": "left the role"} for t in found[1]],
            }
        )

    tokenizer = load(tiny_model())[1]
    weights = {"judge_breaks": -1.0, "ooc_count": -0.5}
    with chat_stub(judge) as stub:
        settings = env_settings(cfg, stub.url, ("turn_rewards", weights))
        env = ConversationEnv(settings, open_client, chat_renderer(tiny_model(), tokenizer, 1024))
        scores, rewards, scored = env.score(sessions)
        turns = env.score_turns(sessions)
        env.close()
    assert scores["session_judge"] == [1.0, 0.5, None, None]
    assert turns.by_name["judge_breaks"][:2] == [[0.0, 1.0, 0.0], [0.0, 0.0, 0.0]]
    assert turns.by_name["judge_breaks"][2] == [None, None, None]
    assert turns.by_name["ooc_count"][:2] == [[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
    assert turns.combined == [[0.0, -1.5, 0.0], [0.0, 0.0, -0.5], None, None]


def constant_one(prompts, completions, references) -> list[float]:
    return [1.0] * len(completions)


def late_letters(sessions, options) -> list[list[float]]:
    """Toy turn reward: from the second turn on, the share of the reply's characters that are an "e"."""
    return [
        [0.0 if t == 0 else r.count("e") / max(len(r), 1) for t, r in enumerate(s.session.replies)] for s in sessions
    ]


@pytest.mark.slow  # two optimiser steps of 8 sessions through Lightning
@pytest.mark.parametrize("advantage", ["turn_loo", "mt_grpo", "utterance_share"])
def test_a_turn_level_estimator_trains_and_logs_the_turn_rewards(
    advantage, tmp_path, scenario, registered, chat_stub, composed, tiny_model
):
    """Two steps with a session reward and a turn reward: the steps run, and the logged rewards are the session
    reward (1) beside the turn reward's mean; train/reward is their sum per session."""
    entries = ((REWARDS, "test_constant_one", constant_one), (TURN_REWARDS, "test_late_letters", late_letters))
    with registered(*entries), chat_stub(lambda body: "Go on.") as stub:
        cfg = composed(
            tmp_path / "run",
            "objective=grpo",
            "env=conversation",
            "data=sample_conversation",
            "data.val_fraction=0",
            *stub_judge(stub.url),
            "env.rewards=[{name: test_constant_one, weight: 1.0}]",
            "+env.turn_rewards.test_late_letters=2.0",
            "env.simulator_checks=[]",  # the scripted user's one reply would fail them
            f"objective.advantage={advantage}",
            "objective.epochs=2",
            "objective.batch_size=1",
            "objective.num_generations=4",
            "objective.max_completion_length=6",
            "save_model=false",
            "trainer.enable_progress_bar=false",
        )
        run = validate(cfg)
        model, tokenizer = load(run.model)
        logger = CSVLogger(str(tmp_path), name="csv", version=0)
        report = train(run.training, model, tokenizer, [scenario], [], tmp_path, logger=logger)
    with open(tmp_path / "csv" / "version_0" / "metrics.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r.get("train/turn_reward_mean")]
    assert report["optimizer_steps"] == 2 and len(rows) == 2
    for row in rows:
        assert float(row["train/session_reward_mean"]) == 1.0
        assert 0 <= float(row["train/turn_rewards/test_late_letters/mean"]) <= 1
        assert math.isfinite(float(row["train/loss"]))


@pytest.mark.slow  # loads the packaged sentence encoder
def test_card_similarity_and_drift_step_against_a_direct_computation(scenario, group_values):
    """The packaged MiniLM: each reply's cosine to the card computed here from the raw embeddings; drift_step is
    its change from the turn before (0 on turn 1); an empty reply has no embedding, so its session has no turn
    rewards."""
    import numpy as np

    from rpbench.objectives.turn_credit.rewards import JudgedSession, TurnRewardOptions, TurnRewardSet
    from rpbench.scoring.sentence_encoder import load_sentence_encoder

    replies = ["I tend herbs and watch the seasons.", "Quarterly revenue rose by ten percent.", "Sage likes sun."]
    sessions = [Session.start(scenario, 3), Session.start(scenario, 3)]
    for session, texts in zip(sessions, [replies, ["Rue.", " ", "Mint."]], strict=True):
        for k, text in enumerate(texts):
            session.add_reply(text)
            if k < 2:
                session.take_user_reply("More?", None, k + 1, "[END]")
    defaults = group_values("env", "conversation", "env.turn_reward_options")
    values = {**defaults, "ooc_phrases": [], "encoder": None, "batch_size": 4}
    options = TurnRewardOptions.parse(values, "env.turn_reward_options")
    rewards = TurnRewardSet({"card_similarity": 1.0, "drift_step": 2.0}, options, None)
    found = rewards.score([JudgedSession(s, None) for s in sessions])
    raw = load_sentence_encoder(None, "test")[0].encode([SCENARIO["card"], *replies], convert_to_numpy=True)
    cosine = [float(raw[0] @ v / np.linalg.norm(raw[0]) / np.linalg.norm(v)) for v in raw[1:]]
    assert found.by_name["card_similarity"][0] == pytest.approx(cosine, abs=1e-5)
    steps = [0.0, cosine[1] - cosine[0], cosine[2] - cosine[1]]
    assert found.by_name["drift_step"][0] == pytest.approx(steps, abs=1e-5)
    assert steps[1] < -0.1  # the off-card reply moves away from the card
    assert found.combined[0] == pytest.approx([c + 2 * s for c, s in zip(cosine, steps, strict=True)], abs=1e-5)
    assert found.by_name["card_similarity"][1][1] is None and found.combined[1] is None
