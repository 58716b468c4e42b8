"""env=conversation: GRPO rollouts that are whole sessions between the tiny policy and a user simulator on
127.0.0.1 (a scripted chat stub, or judge=local's server through the pipeline); only the character turns'
tokens are supervised; the session judge's reward; named errors for what cannot work."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
from lightning.pytorch.loggers import CSVLogger
from omegaconf import OmegaConf
from stub_endpoints import stub_judge

from rpbench.core.errors import ConfigError
from rpbench.data import readers
from rpbench.data.chat import IGNORE_INDEX
from rpbench.data.conversation_session import Session
from rpbench.data.readers import NoRubrics
from rpbench.models import chat_renderer, load
from rpbench.models.generation import decode_completion, default_stop_ids
from rpbench.objectives.conversation_env import ConversationEnv, ConversationEnvSettings, SessionJudgeReward
from rpbench.objectives.grpo import completion_batch
from rpbench.objectives.sampling import rollout_options
from rpbench.scoring.chat.client import EndpointSettings, open_client
from rpbench.scoring.rewards import REWARDS
from rpbench.training import train
from rpbench.validate import validate

SCENARIOS = [
    {
        "id": "train-ida-garden",
        "character": "Ida Brenn",
        "card": "Ida Brenn, a gardener in a walled town. She knows herbs and seasons.",
        "persona": "Jo, a new neighbour.",
        "goal": "Learn which herbs to plant in spring.",
        "opening": "Hello Ida, what should I plant?",
        "turns": 2,
    },
    {
        "id": "train-olav-forge",
        "character": "Olav Hart",
        "card": "Olav Hart, a village smith. He knows iron and horses.",
        "persona": "Pia, a traveller.",
        "goal": "Get a horseshoe mended.",
        "opening": "Good day, smith. Can you mend this shoe?",
        "turns": 2,
    },
]
USER_REPLY = "Tell me more."
SCORES = {
    "character_consistency": 4,
    "persona_drift": 4,
    "knowledge_boundary": 5,
    "out_of_character": 3,
    "engagement": 4,
    "goal_progress": 2,
}


@pytest.fixture
def scenarios(tmp_path) -> Path:
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps(s) + "\n" for s in SCENARIOS))
    return path


def conversation_env(cfg, base_url: str, renderer) -> ConversationEnv:
    """The env of a composed run, its judge (the simulator) pointed at ``base_url``."""
    settings = OmegaConf.to_container(cfg.env, resolve=True)
    settings["judge"] |= {"base_url": base_url, "api_key_env": None, "cache_path": None, "progress": False}
    return ConversationEnv(ConversationEnvSettings.parse(settings, "env"), open_client, renderer)


def labelled_runs(ids: list[int], labels: list[int]) -> list[list[int]]:
    """The maximal runs of labelled tokens (each label checked to be its token)."""
    runs, current = [], []
    for token, label in zip(ids, labels, strict=True):
        if label == IGNORE_INDEX:
            runs, current = runs + [current] if current else runs, []
            continue
        assert label == token
        current.append(token)
    return runs + [current] if current else runs


def test_a_session_is_one_sequence_with_only_the_character_turns_supervised(
    tmp_path, scenarios, tiny_model, composed, chat_stub
):
    """Two sessions of a 2-turn scenario: decoding the labelled runs gives the character's turns, and the whole
    sequence decodes to the chat template's rendering of the conversation (system prompt, opening, the user
    simulator's turn: all unlabelled). Token ids 100-399 also stop a turn, so turns end on a stop token of
    their own (then labelled, and the end of turn added unlabelled) or at the length limit."""
    cfg = composed(
        tmp_path / "run",
        "objective=grpo",
        "env=conversation",
        "judge=openai",
        "env.rewards=[{name: non_empty, weight: 1.0}]",
    )
    model, tokenizer = load(tiny_model())
    model.generation_config.eos_token_id = [*model.generation_config.eos_token_id, *range(100, 400)]
    renderer = chat_renderer(tiny_model(), tokenizer, 1024)
    (scenario,) = readers.read("conversation", "train", scenarios, NoRubrics(task_dimensions=None)).examples[:1]
    stop_ids = default_stop_ids(model, tokenizer)
    with chat_stub(lambda body: USER_REPLY) as stub:
        env = conversation_env(cfg, stub.url, renderer)
        options = rollout_options(
            max_new_tokens=6, temperature=1.0, top_p=1.0, top_k=0, cache="dynamic", gather_per_batch=True
        )
        rollouts, sessions = env.play(model, [scenario], 2, options, stop_ids, tokenizer.pad_token_id, seed=3)
        env.close()
        asked = stub.requests
    assert len(asked) == 2  # after turn 1 of each session; turn 2 is the limit
    end_of_turn = tokenizer.convert_tokens_to_ids(renderer.end_of_turn)
    batch = completion_batch(rollouts, [0, 1], tokenizer.pad_token_id)
    endings = set()
    for row, session in enumerate(sessions):
        assert session.ended_by == "turn_limit" and session.character_turns == 2
        n = int(batch["attention_mask"][row].sum())
        ids, labels = batch["input_ids"][row, :n].tolist(), batch["labels"][row, :n].tolist()
        runs = labelled_runs(ids, labels)
        assert len(runs) == 2 and sum(map(len, runs)) == rollouts.policy_lengths[row]
        assert [decode_completion(tokenizer, run, stop_ids) for run in runs] == session.replies
        # the character's contents: each run without the end of turn it may close with
        contents = [tokenizer.decode(run[:-1] if run[-1] == end_of_turn else run) for run in runs]
        endings |= {"end_of_turn" if r[-1] == end_of_turn else "stop" if r[-1] in stop_ids else "cut" for r in runs}
        messages = [
            {"role": "system", "content": scenario.prompt[0].content},
            {"role": "user", "content": scenario.prompt[1].content},
            {"role": "assistant", "content": contents[0]},
            {"role": "user", "content": USER_REPLY},
            {"role": "assistant", "content": contents[1]},
        ]
        assert tokenizer.decode(ids) + "\n" == tokenizer.apply_chat_template(messages, tokenize=False)
        unlabelled = tokenizer.decode([t for t, label in zip(ids, labels, strict=True) if label == IGNORE_INDEX])
        assert USER_REPLY in unlabelled and scenario.prompt[0].content in unlabelled
    assert endings == {"stop", "cut"}  # this seed's turns end both ways


@pytest.mark.slow
def test_grpo_on_sessions_through_the_pipeline_with_the_local_judge(
    tmp_path, scenarios, run_in_process, scripted_judge
):
    """`python run.py objective=grpo env=conversation judge=local`: the local server plays the user and judges
    (scripted replies), one optimiser step on 2 scenarios x 2 sessions of 2 turns each. Olav's verdicts are
    unreadable: his two sessions get no reward (counted, the share logged), and the reward is Ida's alone."""
    verdict = json.dumps({"scores": SCORES, "breaks": []})
    replies = {
        "Write only your next message": USER_REPLY,
        "played the character Olav Hart": "no verdict here",
        "You are judging a role-play": verdict,
    }
    out = tmp_path / "run"
    results = run_in_process(
        out,
        "objective=grpo",
        "env=conversation",
        "env.simulator_checks=[]",  # the scripted user's one reply would fail them (tests/objectives/test_checked_*)
        "data=sample_conversation",
        f"data.files.train={scenarios}",
        "evaluator=none",
        "judge=local",
        "judge.cache_path=null",
        "judge.progress=false",
        "judge.parse_tries=1",
        "objective.num_generations=2",
        "objective.batch_size=2",
        "objective.max_completion_length=6",
        "save_model=false",
        "trainer.enable_progress_bar=false",
        local_judge_server=scripted_judge(replies=replies),
    )
    assert results["train"]["optimizer_steps"] == 1 and results["train"]["samples"]["train"] == 2
    # the tiny model's tuning lets one local model play the user and judge the sessions, named in the results
    assert [w for w in results["warnings"] if "(allowed by env.allow_shared_judge=true)" in w]
    with open(out / "metrics.csv", newline="") as f:
        (row,) = [r for r in csv.DictReader(f) if r.get("train/reward")]
    # the mean of the rubric's six scores on 1-5, mapped to [0, 1]
    assert float(row["train/reward"]) == pytest.approx((sum(SCORES.values()) / 6 - 1) / 4)
    assert float(row["train/reward_failures"]) == 2 and float(row["train/left_out_fraction"]) == 0.5
    assert float(row["train/env/character_turns/mean"]) == 2  # the simulator answered after turn 1
    assert float(row["train/env/ended_by/turn_limit"]) == 1
    assert float(row["train/completion_length/mean"]) > 0


@pytest.mark.slow
def test_grpo_on_sessions_under_ddp_rolls_out_each_rank_s_scenarios(tmp_path, run_script, chat_stub):
    """`python run.py objective=grpo env=conversation trainer.devices=2`: two gloo ranks on CPU, one scenario each
    per step, 2 sessions each, against one user and judge endpoint (a stub on 127.0.0.1). Every scenario's sessions
    are rolled out and judged once (8 sessions over 2 steps), and the logged reward is the judge's."""
    more = [{**s, "id": f"{s['id']}-again", "persona": s["persona"].replace(".", ", again.")} for s in SCENARIOS]
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps(s) + "\n" for s in SCENARIOS + more))
    verdict = json.dumps({"scores": SCORES, "breaks": []})

    def reply(body: dict) -> str:
        return USER_REPLY if "Write only your next message" in body["messages"][-1]["content"] else verdict

    out = tmp_path / "run"
    with chat_stub(reply) as stub:
        result = run_script(
            "run.py", f"hydra.run.dir={out}", "objective=grpo", "env=conversation", "env.simulator_checks=[]",
            "data=sample_conversation", f"data.files.train={train}", "data.val_fraction=0", "evaluator=none",
            *stub_judge(stub.url), "judge.parse_tries=1", "objective.num_generations=2", "objective.batch_size=1",
            "objective.max_completion_length=6", "save_model=false", "trainer.enable_progress_bar=false",
            "trainer.devices=2", "trainer.strategy=ddp", "logger=csv",
        )  # fmt: skip
        requests = list(stub.requests)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((out / "metrics.json").read_text())["train"]["optimizer_steps"] == 2
    judged = [b["messages"] for b in requests if "Write only your next message" not in b["messages"][-1]["content"]]
    personas = [s["persona"] for s in SCENARIOS + more]
    seen = [next(p for p in personas if any(p in m["content"] for m in messages)) for messages in judged]
    assert sorted(seen) == sorted(personas * 2)  # each scenario's 2 sessions, whichever rank rolled them out
    with open(out / "metrics.csv", newline="") as f:
        rewards = [float(r["train/reward"]) for r in csv.DictReader(f) if r.get("train/reward")]
    assert rewards == pytest.approx([(sum(SCORES.values()) / 6 - 1) / 4] * 2)


def test_the_session_judge_scores_each_session_once_and_counts_what_it_cannot_score(
    tmp_path, scenarios, composed, chat_stub
):
    """Ida's session gets a verdict (weighted: (3 * 5 + 1 * 2) / 4 = 4.25 on 1-5, so 0.8125); Olav's verdict is
    unreadable, so it gets no score (None, never the worst reward) and is counted."""
    cfg = composed(tmp_path / "run", "objective=grpo", "env=conversation", "judge=openai")
    verdict = json.dumps({"scores": SCORES, "breaks": []})
    sessions = [
        Session.start(e, cfg.env.max_turns)
        for e in readers.read("conversation", "train", scenarios, NoRubrics(task_dimensions=None)).examples
    ]
    for session in sessions:
        session.add_reply("Plant sage.")
    with chat_stub(lambda body: verdict if "Ida Brenn" in body["messages"][-1]["content"] else "maybe") as stub:
        judge = OmegaConf.to_container(cfg.judge, resolve=True)
        judge |= {"base_url": stub.url, "api_key_env": None, "cache_path": None, "progress": False, "parse_tries": 1}
        weights = {"knowledge_boundary": 3.0, "goal_progress": 1.0}
        config = EndpointSettings.parse(judge, "judge")
        reply_tokens = cfg.env.rewards[0].kwargs.max_tokens
        reward = SessionJudgeReward(config, dict(cfg.env.rubric), weights, reply_tokens, opener=open_client)
        scores = reward([s.record() for s in sessions], ["", ""], [None, None])
        reward.close()
        asked = stub.requests
    assert scores == [pytest.approx((17 / 4 - 1) / 4), None] and reward.failures == 1
    assert len(asked) == 2  # one request per session (parse_tries=1: no re-ask)
    assert {request["max_tokens"] for request in asked} == {512}  # the session judge's reply length (env.rewards)


def test_a_failed_verdict_or_a_cut_session_gets_zero_advantage_and_the_rest_of_its_group_is_normalised_alone(
    tmp_path, scenarios, composed, chat_stub, tiny_model
):
    """Ida's group of 4 sessions is judged 5, 3, unreadable and 1 on every dimension (rewards 1, 0.5, none, 0);
    Olav's first session was cut short by the simulator (never judged), the others judged 5, 3, 3. A session
    without a reward gets advantage 0 and the rest of its group is normalised over itself only: Ida's mean 0.5
    and std 0.5 (Bessel, over 1, 0.5, 0), Olav's mean 2/3 and std sqrt(1/12)."""
    from rpbench.objectives.losses import group_advantages

    cfg = composed(tmp_path / "run", "objective=grpo", "env=conversation", "judge=openai")
    examples = readers.read("conversation", "train", scenarios, NoRubrics(task_dimensions=None)).examples
    replies = ["Plant sage.", "Plant mint.", "Plant rue.", "Plant nothing.", "Aye.", "Give it here.", "Soon.", "No."]
    sessions = [Session.start(e, cfg.env.max_turns) for e in examples for _ in range(4)]
    for session, reply in zip(sessions, replies, strict=True):
        session.add_reply(reply)
    sessions[4].take_user_reply(None, "HTTP 503", 1, "[END]")
    verdicts = {"Plant sage.": 5, "Plant mint.": 3, "Plant nothing.": 1, "Give it here.": 5, "Soon.": 3, "No.": 3}

    def judge(body: dict) -> str:
        text = body["messages"][-1]["content"]
        score = next((v for reply, v in verdicts.items() if f": {reply}\n" in text), None)
        return json.dumps({"scores": dict.fromkeys(SCORES, score), "breaks": []}) if score else "no verdict"

    tokenizer = load(tiny_model())[1]
    with chat_stub(judge) as stub:
        settings = OmegaConf.to_container(cfg.env, resolve=True)
        endpoint = {"base_url": stub.url, "api_key_env": None, "cache_path": None, "progress": False, "parse_tries": 1}
        settings["judge"] |= endpoint
        settings["rewards"][0]["kwargs"]["judge"] |= endpoint
        env = ConversationEnv(
            ConversationEnvSettings.parse(settings, "env"), open_client, chat_renderer(tiny_model(), tokenizer, 1024)
        )
        scores, rewards, scored = env.score(sessions)
        env.close()
        judged = len(stub.requests)
    assert judged == 7  # the cut session is not judged
    assert scores["session_judge"] == [1.0, 0.5, None, 0.0, None, 1.0, 0.5, 0.5]
    assert scored.tolist() == [True, True, False, True, False, True, True, True]
    olav_std = math.sqrt(((1 / 3) ** 2 + 2 * (1 / 6) ** 2) / 2)
    expected = [
        0.5 / 0.5001,
        0.0,
        0.0,
        -0.5 / 0.5001,
        0.0,
        (1 / 3) / (olav_std + 1e-4),
        *[(-1 / 6) / (olav_std + 1e-4)] * 2,
    ]
    assert group_advantages(rewards, 4, "group", scored=scored).tolist() == pytest.approx(expected, rel=1e-6)


def letter_fraction(prompts, completions, references) -> list[float]:
    """Toy rule reward of a character turn: the share of its characters that are an "e"."""
    return [c.count("e") / max(len(c), 1) for c in completions]


@pytest.mark.slow  # 24 optimiser steps of 16 two-turn sessions: about a minute on 2 busy cores
def test_a_reward_on_the_character_turns_is_learnt(tmp_path, scenarios, registered, chat_stub, composed):
    """The learnable toy: a rule reward on each character turn (averaged per session) rises over 24 optimiser
    steps of the tiny random policy (8 sessions of 2 turns per scenario, a scripted user)."""
    examples = readers.read("conversation", "train", scenarios, NoRubrics(task_dimensions=None)).examples
    with registered((REWARDS, "test_turn_letter_fraction", letter_fraction)), chat_stub(lambda b: USER_REPLY) as stub:
        cfg = composed(
            tmp_path / "run",
            "objective=grpo",
            "env=conversation",
            "data=sample_conversation",
            "data.val_fraction=0",
            *stub_judge(stub.url),
            "env.rewards=[{name: test_turn_letter_fraction, weight: 1.0}]",
            "env.simulator_checks=[]",  # the scripted user's one reply would fail them
            "objective.epochs=12",
            "objective.batch_size=1",
            "objective.lr=3e-2",
            "objective.num_generations=8",
            "objective.max_completion_length=8",
            "save_model=false",
            "trainer.enable_progress_bar=false",
        )
        model, tokenizer = load(validate(cfg).model)
        logger = CSVLogger(str(tmp_path), name="csv", version=0)
        report = train(validate(cfg).training, model, tokenizer, examples, [], tmp_path, logger=logger)
    with open(tmp_path / "csv" / "version_0" / "metrics.csv", newline="") as f:
        rewards = [float(r["train/reward"]) for r in csv.DictReader(f) if r.get("train/reward")]
    assert report["optimizer_steps"] == len(rewards) == 24
    assert sum(rewards[-6:]) / 6 > 2 * sum(rewards[:6]) / 6, rewards


ZERO3 = ["objective=grpo", "trainer=deepspeed_zero3", "objective.clip_grad_norm=null"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["objective=sft"], "env=conversation: objective=sft rolls out in no environment; choose objective=grpo"),
        (["objective=grpo", "data=sample"], "env=conversation trains on conversation scenarios"),
        (["objective=grpo", "judge=none"], "env.judge"),
        (["objective=grpo", "env.simulator.server=tiny-qwen2"], "env.simulator.server"),
        (["objective=grpo", "data.val_fraction=0.5"], "no reference to hold out a loss on; set data.val_fraction=0"),
        (["objective=grpo", "objective.rollout_backend=vllm"], "objective.rollout_backend='vllm': expected hf"),
        (ZERO3, r"env=conversation under ZeRO-3: ranks play sessions .* train with trainer=ddp or deepspeed_zero2"),
        (["objective=grpo", "trainer=deepspeed_zero2"], r"objective.clip_grad_norm=1.0: DeepSpeed clips gradients"),
        (
            [
                "objective=grpo",
                "trainer=deepspeed_zero2",
                "objective.clip_grad_norm=null",
                "objective.backward_chunk_size=2",
            ],
            r"objective.backward_chunk_size=2: under DeepSpeed each optimiser step must be one backward",
        ),
    ],
)
def test_what_cannot_roll_out_sessions_is_named(tmp_path, overrides, message, composed):
    cfg = composed(tmp_path / "run", "env=conversation", "data=sample_conversation", "judge=local", *overrides)
    with pytest.raises(ConfigError, match=message):
        validate(cfg)


def test_zero2_sessions_pass_validation(tmp_path, composed):
    """Only ZeRO-3 partitions the policy: under ZeRO-2 (DeepSpeed clipping) the same sessions validate."""
    overrides = (
        "env=conversation",
        "data=sample_conversation",
        "judge=local",
        "objective=grpo",
        "trainer=deepspeed_zero2",
        "trainer.accelerator=cpu",  # validated here, on a machine without CUDA
    )
    validate(composed(tmp_path / "run", *overrides, "objective.clip_grad_norm=null"))


@pytest.mark.parametrize(
    ("weights", "expected"),
    [
        ({"knowledge_boundary": 1.0, "goal_progres": 1.0}, "weights of rubric dimensions"),
        ({"knowledge_boundary": -1.0, "goal_progress": 1.0}, "weights >= 0 with a positive sum"),
        ({"knowledge_boundary": 0, "goal_progress": 0}, "weights >= 0 with a positive sum"),
    ],
)
def test_session_judge_weights_are_checked_at_startup(tmp_path, weights, expected, composed):
    """Weights naming a dimension outside the rubric, or none positive, are a validation error (before loading)."""
    overrides = ("objective=grpo", "env=conversation", "judge=openai")
    cfg = composed(
        tmp_path / "run",
        *overrides,
        "env.rewards.0.kwargs.weights={" + ",".join(f"{k}:{v}" for k, v in weights.items()) + "}",
    )
    with pytest.raises(ConfigError, match=rf"kwargs\.weights=.*expected .*{expected}"):
        validate(cfg)
