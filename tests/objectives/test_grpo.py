"""GRPO: rollouts, record handling, and real Lightning Trainer runs on the tiny models."""

from __future__ import annotations

import csv
import importlib.util
import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from lightning.pytorch.loggers import CSVLogger
from omegaconf import OmegaConf

from rpbench.data import readers
from rpbench.data.chat import ChatRenderer
from rpbench.data.records import EvalExample, PreferenceExample, SFTExample, Turn
from rpbench.models import load
from rpbench.objectives.grpo import GRPOModule, GRPOSettings, prompt_and_reference, rank_slice_of_batch_advantages
from rpbench.objectives.losses import group_advantages
from rpbench.objectives.reference import DisabledAdapter, FrozenCopy
from rpbench.objectives.sampling import cut_at_stop, generation_mode, repeat_each, sample_completions
from rpbench.scoring.chat.client import client_opener, open_client
from rpbench.scoring.rewards import REWARDS, JudgeReward
from rpbench.training import train
from rpbench.validate import validate

SAMPLE_DIR = Path(__file__).resolve().parents[2] / "rpbench" / "resources" / "sample" / "rolemrc"
TARGET_LETTER = "e"


@REWARDS.register("test_letter_fraction")
def letter_fraction(prompts, completions, references) -> list[float]:
    """Toy rule reward: the share of the completion's characters that are the target letter."""
    return [c.count(TARGET_LETTER) / max(len(c), 1) for c in completions]


@pytest.fixture(scope="module")
def rolemrc_records(data_options):
    """The bundled RoleMRC sample's SFT records (GRPO trains on the first 16 prompts, validates on the next 4)."""
    return readers.read("rolemrc", "train", SAMPLE_DIR / "train-sft.jsonl", data_options("sample")).examples


@pytest.fixture(scope="module")
def run_grpo(rolemrc_records):
    """(report, trained model, logged training rows) of a GRPO run on 16 prompts with the toy reward.

    ``extra_stop_ids`` more token ids end a completion, so that a random model's completions vary in length;
    ``judges`` opens the judges of judge rewards (as the pipeline hands it to training).
    """

    def run_grpo(
        compose,
        out_dir: Path,
        *overrides: str,
        model_name: str = "tiny-qwen2",
        extra_stop_ids: int = 0,
        judges=open_client,
    ):
        cfg = compose(
            "objective=grpo",
            f"model={model_name}",
            "logger=none",
            "trainer.enable_progress_bar=false",
            "save_model=false",
            "objective.rewards=[{name: test_letter_fraction, weight: 1.0}]",
            *overrides,
        )
        model, tokenizer = load(validate(cfg).model)
        model.generation_config.eos_token_id = [
            *model.generation_config.eos_token_id,
            *range(100, 100 + extra_stop_ids),
        ]
        logger = CSVLogger(str(out_dir), name="csv", version=0)
        report = train(
            validate(cfg).training,
            model,
            tokenizer,
            rolemrc_records[:16],
            rolemrc_records[16:20],
            out_dir,
            logger=logger,
            judges=judges,
        )
        with open(out_dir / "csv" / "version_0" / "metrics.csv", newline="") as f:
            rows = [row for row in csv.DictReader(f) if row.get("train/reward")]
        return report, model, rows

    return run_grpo


# -- rollouts -------------------------------------------------------------------------------------------


def test_repeat_each_keeps_a_prompts_completions_contiguous():
    assert repeat_each(["a", "b"], 3) == ["a", "a", "a", "b", "b", "b"]
    with pytest.raises(ValueError):
        repeat_each(["a"], 0)


def test_cut_at_stop_keeps_the_stop_token_and_flags_truncation():
    assert cut_at_stop([5, 6, 2, 0, 0], [2, 9]) == ([5, 6, 2], False)
    assert cut_at_stop([5, 9, 2], [2, 9]) == ([5, 9], False)
    assert cut_at_stop([5, 6, 7], [2]) == ([5, 6, 7], True)


def test_sample_completions_gives_g_seeded_completions_per_prompt(tiny_model, generation_options, rolemrc_records):
    model, tokenizer = load(tiny_model())
    renderer = ChatRenderer(tokenizer, "<|im_end|>", 512)
    prompts = [renderer.render_prompt(prompt_and_reference(r)[0]) for r in rolemrc_records[:2]]
    options = generation_options(max_new_tokens=6, temperature=1.0)
    first = sample_completions(model, prompts, 3, options, [2], tokenizer.pad_token_id, seed=7)
    assert first.prompt_ids == [prompts[0]] * 3 + [prompts[1]] * 3
    assert len(first.completion_ids) == 6 and all(1 <= len(c) <= 6 for c in first.completion_ids)
    assert all(t == (len(c) == 6 and 2 not in c) for c, t in zip(first.completion_ids, first.truncated, strict=True))
    assert len({tuple(c) for c in first.completion_ids}) > 1  # sampled, not greedy
    again = sample_completions(model, prompts, 3, options, [2], tokenizer.pad_token_id, seed=7)
    other = sample_completions(model, prompts, 3, options, [2], tokenizer.pad_token_id, seed=8)
    assert again.completion_ids == first.completion_ids and other.completion_ids != first.completion_ids
    with pytest.raises(ValueError, match="temperature > 0"):
        sample_completions(model, prompts, 3, generation_options(temperature=0.0), [2], tokenizer.pad_token_id, seed=7)


def test_generation_mode_switches_checkpointing_off_and_restores_it(tiny_model):
    model, _ = load(tiny_model("llama", gradient_checkpointing=True))
    model.train()
    flagged = [m for m in model.modules() if getattr(m, "gradient_checkpointing", False)]
    assert flagged
    with generation_mode(model):
        assert not any(getattr(m, "gradient_checkpointing", False) for m in model.modules())
        assert not model.training and not torch.is_grad_enabled()
    assert model.training and torch.is_grad_enabled()
    assert [m for m in model.modules() if getattr(m, "gradient_checkpointing", False)] == flagged


def test_batch_scaled_advantages_use_the_std_of_every_ranks_rewards():
    parts = [[1.0, 0.0, 2.0, 2.0], [], [5.0, 1.0, 0.0, 3.0]]  # rank 1 only evens out the step
    everything = group_advantages(torch.tensor([1.0, 0.0, 2.0, 2.0, 5.0, 1.0, 0.0, 3.0]), 2, "batch")
    assert torch.equal(rank_slice_of_batch_advantages(parts, 0, 2), everything[:4])
    assert torch.equal(rank_slice_of_batch_advantages(parts, 2, 2), everything[4:])
    assert rank_slice_of_batch_advantages(parts, 1, 2).numel() == 0
    std = torch.tensor([1.0, 0.0, 2.0, 2.0, 5.0, 1.0, 0.0, 3.0]).std()
    assert rank_slice_of_batch_advantages(parts, 2, 2)[0].item() == pytest.approx(2.0 / (std.item() + 1e-4))


def test_batch_scaled_advantages_leave_out_every_ranks_unscored_completions():
    """A completion without a reward (None) on any rank gets 0 and is left out of the batch std: the std is
    over 1, 2, 5, 1 and 3 alone (Bessel: mean 2.4, squared deviations 11.2, so sqrt(2.8))."""
    parts = [[1.0, None, 2.0, 5.0], [1.0, 3.0]]
    std = math.sqrt(11.2 / 4)
    assert rank_slice_of_batch_advantages(parts, 0, 2).tolist() == [
        0.0,
        0.0,
        pytest.approx(-1.5 / (std + 1e-4)),
        pytest.approx(1.5 / (std + 1e-4)),
    ]
    assert rank_slice_of_batch_advantages(parts, 1, 2).tolist() == [
        pytest.approx(-1.0 / (std + 1e-4)),
        pytest.approx(1.0 / (std + 1e-4)),
    ]


# -- records --------------------------------------------------------------------------------------------


def test_prompts_and_references_come_from_every_record_type(tiny_model):
    system, user, reply = Turn("system", "You are a knight."), Turn("user", "Who are you?"), Turn("assistant", "Rowan.")
    later = (Turn("user", "And your castle?"), Turn("assistant", "Highmoor."))
    sft = SFTExample("s", (system, user, reply, *later))
    assert prompt_and_reference(sft) == ((system, user, reply, later[0]), "Highmoor.")
    pair = PreferenceExample("p", (system, user), chosen="Rowan.", rejected="Nobody.")
    assert prompt_and_reference(pair) == ((system, user), "Rowan.")
    test = EvalExample("t", (system, user), reference="Rowan.", task="role_related_mrc_answer_no_narration")
    assert prompt_and_reference(test) == ((system, user), "Rowan.")

    _, tokenizer = load(tiny_model())
    renderer = ChatRenderer(tokenizer, "<|im_end|>", 512)
    no_prompt = SFTExample("n", (Turn("assistant", "Hail!"),))
    samples, empty = GRPOModule.render([sft, pair, test, no_prompt], renderer)
    assert [s["id"] for s in samples] == ["s", "p", "t"] and empty == ["n"]
    assert samples[0]["prompt_ids"] == renderer.render_prompt(sft.turns[:4])
    # the held-out NLL is the reference's alone, not the earlier assistant turn's, after the same prompt tokens
    labelled = [t for t, label in zip(samples[0]["input_ids"], samples[0]["labels"]) if label != -100]
    assert tokenizer.decode(labelled) == "Highmoor.<|im_end|>"
    assert samples[0]["input_ids"][: len(samples[0]["prompt_ids"])] == samples[0]["prompt_ids"]
    assert samples[1]["reference"] == "Rowan."
    assert samples[1]["messages"][-1] == {"role": "user", "content": "Who are you?"}
    assert GRPOModule.sample_weight(samples[0]) == 1


# -- training -------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_few_steps_raise_a_rule_based_reward(compose, tmp_path, run_grpo):
    report, _, rows = run_grpo(
        compose, tmp_path, "objective.epochs=4", "objective.lr=3e-2", "objective.num_generations=8"
    )
    rewards = [float(r["train/reward"]) for r in rows]
    assert len(rewards) == report["optimizer_steps"] == 16  # 16 prompts / 4 per step x 4 epochs
    assert sum(rewards[-3:]) / 3 > 2 * sum(rewards[:3]) / 3, rewards
    last = rows[-1]
    assert float(last["train/rewards/test_letter_fraction/mean"]) == pytest.approx(rewards[-1], rel=1e-6)
    for key in (
        "reward/std",
        "advantages/std",
        "clip_fraction",
        "completion_length/mean",
        "generation_tokens_per_s",
        "zero_std_groups",
        "grad_norm",
    ):
        assert last[f"train/{key}"], key
    assert report["held_out"]["after"]["tokens"] > 0  # validation: NLL of the references


@pytest.mark.slow
@pytest.mark.parametrize("aggregation", ["token_mean", "seq_mean", "dr_grpo"])
def test_backward_chunks_give_the_same_update_as_one_pass(compose, tmp_path, aggregation, run_grpo):
    """Chunks weighted by their share of the step's tokens / completions sum to the one-pass gradient.

    One generation batch and its mu=2 optimiser steps (the second with ratios and KL away from 1 and 0), so both
    runs update on the same completions: a later batch would be sampled from weights that differ by rounding,
    and lr 1 turns that into other completions (on some CPUs weights then differed by 1e-2; on one batch they
    differ by ~1e-8). adam_eps 1 makes Adam's step proportional to the gradient, so weights
    compare gradients (with the default eps, Adam would blow float noise in near-zero gradients up to
    full-size steps).
    """
    common = (
        "trainer.max_steps=2",
        "objective.mu=2",
        "objective.beta=0.04",
        "objective.lr=1.0",
        "objective.adam_eps=1.0",
        f"objective.loss_aggregation={aggregation}",
    )
    _, whole, whole_rows = run_grpo(compose, tmp_path / "whole", *common, extra_stop_ids=300)
    _, chunked, chunked_rows = run_grpo(
        compose, tmp_path / "chunked", *common, "objective.backward_chunk_size=3", extra_stop_ids=300
    )
    assert len(whole_rows) == len(chunked_rows) == 1  # one generation batch
    assert float(whole_rows[0]["train/completion_length/min"]) < 16  # lengths differ: the aggregations differ
    # the second optimiser step's ratios (against the completions' sampling policy) left the clip range
    assert float(whole_rows[0]["train/clip_fraction"]) > 0
    for (name, a), (_, b) in zip(whole.named_parameters(), chunked.named_parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)
    a, b = whole_rows[0], chunked_rows[0]
    assert float(a["train/loss"]) == pytest.approx(float(b["train/loss"]), rel=1e-4, abs=1e-7)
    assert float(a["train/grad_norm"]) == pytest.approx(float(b["train/grad_norm"]), rel=1e-5)
    assert float(a["train/clip_fraction"]) == pytest.approx(float(b["train/clip_fraction"]), abs=1e-6)


@pytest.mark.slow
def test_the_three_aggregations_weigh_tokens_differently(compose, tmp_path, run_grpo):
    norms = {}
    for aggregation in ("token_mean", "seq_mean", "dr_grpo"):
        _, _, rows = run_grpo(
            compose,
            tmp_path / aggregation,
            "trainer.max_steps=1",
            f"objective.loss_aggregation={aggregation}",
            extra_stop_ids=300,
        )
        norms[aggregation] = float(rows[0]["train/grad_norm"])
    assert len({round(v, 6) for v in norms.values()}) == 3, norms
    assert norms["dr_grpo"] < norms["token_mean"]  # dr_grpo divides by G x max length >= the token count


@pytest.mark.slow
def test_resume_from_checkpoint_continues_exactly(compose, tmp_path, run_grpo):
    _, straight, _ = run_grpo(compose, tmp_path / "straight", "objective.epochs=2", "objective.beta=0.04")
    run_grpo(compose, tmp_path / "resumed", "objective.epochs=1", "objective.beta=0.04")
    report, resumed, rows = run_grpo(compose, tmp_path / "resumed", "objective.epochs=2", "objective.beta=0.04")
    assert report["optimizer_steps"] == 8 and len(rows) == 4  # only the second epoch ran again
    for (name, a), (_, b) in zip(straight.named_parameters(), resumed.named_parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.slow
def test_lora_policy_takes_its_kl_against_the_disabled_adapter(compose, tmp_path, run_grpo):
    _, model, rows = run_grpo(
        compose,
        tmp_path,
        "objective.epochs=1",
        "objective.beta=0.1",
        "objective.mu=2",
        "objective.lr=5e-2",
        "model.lora={r: 4, alpha: 8, dropout: 0.0, target_modules: null}",
    )
    assert hasattr(model, "disable_adapter")
    assert float(rows[0]["train/kl"]) == 0.0  # first step: the adapter is still zero
    assert float(rows[-1]["train/kl"]) > 0.0


@pytest.mark.slow
@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("objective.grad_accum=2", "objective.grad_accum=2: expected 1, as objective=grpo optimises manually"),
        ("objective.max_grad_norm=1.0", "objective.max_grad_norm=1.0: expected null, as objective=grpo optimises"),
        ("objective.temperature=0", r"objective.temperature=0.0: expected a number > 0"),
        ("objective.num_generations=1", r"objective.num_generations=1: expected an integer >= 2"),
        ("objective.epsilon_low=-0.2", r"objective.epsilon_low=-0.2: expected a number >= 0 \(the clip range"),
        ("objective.epsilon_high=-0.1", r"objective.epsilon_high=-0.1: expected a number >= 0"),
        ("objective.loss_aggregation=sum", "objective.loss_aggregation='sum': expected one of token_mean, "),
        ("objective.advantage_scale=rank", "objective.advantage_scale='rank': expected one of group, batch, none"),
        ("objective.rollout_backend=sglang", "objective.rollout_backend='sglang': expected one of hf, vllm"),
        ("objective.generation_cache=paged", "objective.generation_cache='paged': expected one of dynamic, static"),
        ("+objective.precompute_ref=true", r"objective.precompute_ref: unknown key; valid keys: .*, mu, "),
    ],
)
def test_invalid_settings_are_refused_when_parsed(compose, override, message):
    cfg = compose("objective=grpo", override)
    with pytest.raises(ValueError, match=message):
        GRPOSettings.parse(OmegaConf.to_container(cfg.objective, resolve=True), "objective")


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_vllm_rollouts_without_vllm_fail_at_fit_start_naming_the_setting(compose, tmp_path, run_grpo):
    with pytest.raises(ImportError, match=r"objective.rollout_backend=vllm needs vLLM, which is not installed"):
        run_grpo(compose, tmp_path, "objective.rollout_backend=vllm", "trainer.max_steps=1")


def test_beta_zero_loads_no_reference_model(compose, tiny_model):
    spec = validate(compose("objective=grpo"))
    model, tokenizer = load(spec.model)
    assert GRPOModule(model, tokenizer, replace(spec.objective, beta=0.0)).reference is None
    assert isinstance(GRPOModule(model, tokenizer, replace(spec.objective, beta=0.04)).reference, FrozenCopy)
    lora, _ = load(tiny_model(lora={"r": 4, "alpha": 8}))
    assert isinstance(GRPOModule(lora, tokenizer, replace(spec.objective, beta=0.04)).reference, DisabledAdapter)


@pytest.mark.parametrize("model_name", ["tiny-qwen2", "tiny-llama", "qwen2.5-7b", "llama3.1-8b"])
def test_grpo_composes_with_each_model_family(compose, model_name):
    cfg = compose("objective=grpo", f"model={model_name}", "seed=5")
    assert cfg.objective.name == "grpo" and cfg.objective.generation_seed == 5
    assert [r.name for r in cfg.objective.rewards] == ["rouge_l", "no_role_break", "length_penalty"]
    tiny = model_name.startswith("tiny")
    assert cfg.objective.num_generations == (4 if tiny else 8)
    assert cfg.objective.lr == pytest.approx(5e-3 if tiny else 1e-6)


@pytest.mark.slow
def test_max_steps_with_mu_counts_optimizer_steps_for_stop_schedule_and_logs(compose, tmp_path, run_grpo):
    """16 prompts / 4 per batch x 2 epochs x mu 2 = 16 optimiser steps planned; max_steps 5 stops after 5,
    inside the third generation batch, and a linear schedule sized to 5 decays over exactly those steps."""
    report, _, rows = run_grpo(
        compose,
        tmp_path,
        "objective.epochs=2",
        "objective.mu=2",
        "trainer.max_steps=5",
        "objective.scheduler=linear",
        "objective.lr=1e-2",
    )
    assert report["optimizer_steps"] == 5
    assert [float(r["train/optimizer_step"]) for r in rows] == [2.0, 4.0, 5.0]
    # lr before optimiser step i (0-based) = 1e-2 * (5 - i) / 5; a row holds its batch's last step's lr
    assert [float(r["train/lr"]) for r in rows] == pytest.approx([1e-2 * 4 / 5, 1e-2 * 2 / 5, 1e-2 * 1 / 5])


@REWARDS.register("test_kept_judge")
class KeptJudge(JudgeReward):
    """The judge reward, keeping its instances so that a test can reach the judge after training."""

    instances: list[JudgeReward] = []

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        KeptJudge.instances.append(self)


@pytest.mark.slow
def test_judge_reward_logs_its_failures_and_is_closed_after_training(compose, tmp_path, scripted_judge, run_grpo):
    """A local judge server that answers every verdict request with "maybe": all 16 verdicts of each step
    (4 prompts x 4 completions) fail, are logged, and the server is stopped when training ends."""
    import httpx

    judge = ["judge=local", "judge.parse_tries=1"]
    judge += ["judge.progress=false", "judge.cache_path=null"]
    kwargs = "{judge: ${judge}, rubric: role_style, max_tokens: 16, failure_reward: 0.5}"
    rewards = f"objective.rewards=[{{name: test_kept_judge, weight: 1.0, kwargs: {kwargs}}}]"
    judges = client_opener(scripted_judge(replies={"": "maybe"}))
    report, _, rows = run_grpo(compose, tmp_path, "objective.epochs=1", rewards, *judge, judges=judges)
    assert report["optimizer_steps"] == len(rows) == 4
    assert [float(r["train/reward_failures"]) for r in rows] == [16.0] * 4
    assert [float(r["train/reward"]) for r in rows] == [0.5] * 4  # every completion got the failure reward
    (kept,) = KeptJudge.instances
    with pytest.raises(httpx.TransportError):  # the judge server is gone
        httpx.get(kept.client.config.base_url.rstrip("/") + "/models", timeout=5)
