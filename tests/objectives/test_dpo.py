"""DPO through real Lightning Trainer runs on the tiny models and the bundled RoleMRC-format pairs."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
import torch
from lightning.pytorch.loggers import CSVLogger
from omegaconf import open_dict

from rpbench.core.paths import CONF_DIR
from rpbench.data.chat import ChatRenderer
from rpbench.models import load
from rpbench.objectives import losses
from rpbench.objectives.dpo import DPOModule, packs_pairs
from rpbench.training import train
from rpbench.validate import validate

QUIET = ("logger=none", "trainer.enable_progress_bar=false", "save_model=false")


@pytest.fixture(scope="module")
def run_dpo(sample_pairs):
    """(report, trained model, logged rows) of a DPO run on ``pairs`` (training, validation; by default the
    first 32 sample pairs and the last 16)."""

    def run_dpo(
        compose,
        out_dir: Path,
        *overrides: str,
        model_name: str = "tiny-qwen2",
        pairs: tuple[list, list] | None = None,
    ):
        pairs = pairs or (sample_pairs[:32], sample_pairs[48:])
        cfg = compose(
            "objective=dpo",
            f"model={model_name}",
            *QUIET,
            "objective.batch_size=4",
            "objective.grad_accum=2",
            "objective.log_every_n_steps=1",
            *overrides,
        )
        model, tokenizer = load(validate(cfg).model)
        logger = CSVLogger(str(out_dir), name="csv", version=0)
        report = train(validate(cfg).training, model, tokenizer, *pairs, out_dir, logger=logger)
        with open(out_dir / "csv" / "version_0" / "metrics.csv", newline="") as f:
            rows = [row for row in csv.DictReader(f) if row.get("train/loss")]
        return report, model, rows

    return run_dpo


@pytest.mark.slow
@pytest.mark.parametrize("model_name", ["tiny-qwen2", "tiny-llama"])
def test_reward_margin_grows_on_the_sample_pairs(compose, tmp_path, model_name, run_dpo, sample_pairs):
    """DPO learns the pairs it is trained on: 8 epochs of one optimiser step on 8 pairs, validated (the same
    code as on held-out pairs) on those 8 pairs. A random tiny model does not generalise to unseen pairs."""
    pairs = sample_pairs[:8]
    report, _, rows = run_dpo(compose, tmp_path, "objective.epochs=8", model_name=model_name, pairs=(pairs, pairs))
    assert report["optimizer_steps"] == 8  # 8 pairs / (4 x 2) x 8 epochs
    before, after = report["held_out"]["before"], report["held_out"]["after"]
    assert before["loss"] == pytest.approx(math.log(2), abs=1e-5)  # policy == reference
    assert before["reward_margin"] == pytest.approx(0.0, abs=1e-5) and before["pairs"] == 8
    # seeds 42, 7, 123 (init_seed 0, 1, 2): margin ~1.8, accuracy 1.0, loss ~0.15 on both families
    assert after["reward_margin"] > 0.5 and after["reward_accuracy"] >= 0.875 and after["loss"] < 0.4
    margins = [float(r["train/rewards/margin"]) for r in rows]  # one optimiser step per epoch, the same pairs
    assert margins[0] == pytest.approx(0.0, abs=1e-5) and sum(margins[-3:]) / 3 > sum(margins[1:4]) / 3 + 0.3, margins
    for key in ("rewards/chosen", "rewards/rejected", "rewards/accuracy", "logps/chosen", "logps/rejected"):
        assert rows[-1][f"train/{key}"]


@pytest.mark.slow
def test_precomputed_and_live_reference_give_the_same_losses(compose, tmp_path, run_dpo):
    live_report, _, live = run_dpo(
        compose, tmp_path / "live", "objective.label_smoothing=0.1", "objective.precompute_ref=false"
    )
    cached_report, _, cached = run_dpo(compose, tmp_path / "cached", "objective.label_smoothing=0.1")
    assert (tmp_path / "cached" / "reference_logps.json").is_file()
    assert len(live) == len(cached) == 8
    for a, b in zip(live, cached, strict=True):
        assert float(a["train/loss"]) == pytest.approx(float(b["train/loss"]), rel=1e-5, abs=1e-6)
        assert float(a["train/rewards/margin"]) == pytest.approx(float(b["train/rewards/margin"]), rel=1e-4, abs=1e-6)
    after = live_report["held_out"]["after"]["loss"], cached_report["held_out"]["after"]["loss"]
    assert after[0] == pytest.approx(after[1], rel=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize(("loss_type", "sft_weight"), [("sigmoid", 0.0), ("ipo", 0.5), ("robust", 1.0)])
def test_pair_loss_matches_a_full_logits_computation(
    loss_type, sft_weight, tiny_model, objective_config, sample_pairs, naive_sequence_logps
):
    model, tokenizer = load(tiny_model("llama"))
    smoothing = 0.2 if loss_type == "robust" else 0.0
    module = DPOModule(
        model,
        tokenizer,
        objective_config(
            "dpo",
            lr=1e-3,
            beta=0.3,
            loss_type=loss_type,
            sft_weight=sft_weight,
            label_smoothing=smoothing,
            precompute_ref=False,
        ),
    )
    with torch.no_grad(), torch.random.fork_rng(devices=[]):  # move the policy away from its reference
        torch.manual_seed(3)
        for param in model.parameters():
            param.add_(0.05 * torch.randn_like(param))
    samples, _ = DPOModule.render(sample_pairs[:3], ChatRenderer(tokenizer, "<|eot_id|>", 512))
    batch = DPOModule.collate(samples, tokenizer.pad_token_id)
    batch["loss_scale"] = torch.tensor(1.0)
    with torch.no_grad():
        policy, counts = naive_sequence_logps(model, batch)
        reference, _ = naive_sequence_logps(module.reference.model, batch)
        if loss_type == "ipo":
            policy, reference = policy / counts, reference / counts
        expected, _, _ = losses.dpo_loss(
            policy[:3],
            policy[3:],
            reference[:3],
            reference[3:],
            beta=0.3,
            loss_type=loss_type,
            label_smoothing=smoothing,
        )
        nll = -naive_sequence_logps(model, batch)[0][:3] / counts[:3]
        expected = expected + sft_weight * nll
        got = module.training_step(batch, 0)
    assert got.item() == pytest.approx(expected.sum().item(), rel=5e-5)  # float32, chunked vs full logits


def test_precomputed_reference_is_the_default(objective_settings):
    assert objective_settings("dpo")["precompute_ref"] is True


@pytest.mark.slow
@pytest.mark.parametrize(("family", "attn"), [("qwen2", "sdpa"), ("llama", "eager")])
def test_packed_pairs_give_the_padded_loss_and_gradients(family, attn, tiny_model, objective_config, sample_pairs):
    """pair_layout=packed: one row of the 2B replies back to back, no padding; same loss and gradients."""
    model, tokenizer = load(tiny_model(family, attn_implementation=attn))
    settings = {"lr": 1e-3, "beta": 0.3, "sft_weight": 0.5, "precompute_ref": False}
    padded = DPOModule(model, tokenizer, objective_config("dpo", **settings, pair_layout="padded"))
    packed = DPOModule(model, tokenizer, objective_config("dpo", **settings, pair_layout="packed"))
    packed.reference = padded.reference  # one frozen copy for both
    with torch.no_grad(), torch.random.fork_rng(devices=[]):  # move the policy away from its reference
        torch.manual_seed(3)
        for param in model.parameters():
            param.add_(0.05 * torch.randn_like(param))
    eot = "<|im_end|>" if family == "qwen2" else "<|eot_id|>"
    samples, _ = DPOModule.render(sample_pairs[:3], ChatRenderer(tokenizer, eot, 512))
    batch = DPOModule.collate(samples, tokenizer.pad_token_id)
    batch["loss_scale"] = torch.tensor(1.0)
    assert (batch["attention_mask"] == 0).any()  # the padded batch does carry padding
    losses_and_grads = []
    for module in (padded, packed):
        model.zero_grad()
        loss = module.training_step(batch, 0)
        loss.backward()
        losses_and_grads.append((loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    (loss_a, grads_a), (loss_b, grads_b) = losses_and_grads
    torch.testing.assert_close(loss_b, loss_a, atol=1e-5, rtol=1e-5)
    for name, grad in grads_a.items():
        torch.testing.assert_close(grads_b[name], grad, atol=1e-5, rtol=1e-4, msg=name)
    assert not padded.packed_pairs and packed.packed_pairs


def test_auto_pair_layout_packs_on_flash_kernels_only(tiny_model):
    model, _ = load(tiny_model(attn_implementation="sdpa"))
    assert not packs_pairs("auto", model) and packs_pairs("packed", model) and not packs_pairs("padded", model)
    model.config._attn_implementation = "flash_attention_2"
    assert packs_pairs("auto", model)


def test_render_collates_chosen_then_rejected_and_reports_empty_pairs(tiny_model, sample_pairs):
    _, tokenizer = load(tiny_model())
    renderer = ChatRenderer(tokenizer, "<|im_end|>", 512)
    samples, empty = DPOModule.render(sample_pairs[:2], renderer)
    assert empty == []
    batch = DPOModule.collate(samples, tokenizer.pad_token_id)
    assert batch["input_ids"].shape[0] == 4 and batch["id"] == [p.id for p in sample_pairs[:2]]
    for row, text in enumerate(
        [sample_pairs[0].chosen, sample_pairs[1].chosen, sample_pairs[0].rejected, sample_pairs[1].rejected]
    ):
        labelled = batch["labels"][row][batch["labels"][row] != -100]
        assert tokenizer.decode(labelled) == text + "<|im_end|>"
    short, empty = DPOModule.render(sample_pairs[:1], ChatRenderer(tokenizer, "<|im_end|>", 20))
    assert short == [] and empty == [sample_pairs[0].id]  # truncation left no reply token
    assert DPOModule.sample_weight(samples[0]) == 1


@pytest.mark.slow
@pytest.mark.parametrize("reference", ["precomputed", "live"])
def test_a_run_killed_mid_epoch_resumes_exactly(compose, tmp_path, reference, SimulatedKill, checkpoint_step, run_dpo):
    """Killed inside the second epoch and re-run in its folder: the straight run's steps and weights (ZeRO-3,
    whose reference is precomputed at fit start: tests/test_zero3_init.py)."""
    settings = (
        "objective.scheduler=constant",
        "objective.epochs=2",  # 4 optimizer steps per epoch
        f"objective.precompute_ref={reference == 'precomputed'}",
        "checkpoint_every_n_steps=1",
    )
    _, straight, _ = run_dpo(compose, tmp_path / "straight", *settings)
    kill = "+trainer.callbacks=[{_target_: conftest.KillAfterStep, step: 6}]"
    with pytest.raises(SimulatedKill):
        run_dpo(compose, tmp_path / "resumed", *settings, kill)
    assert checkpoint_step(tmp_path / "resumed" / "checkpoints" / "last.ckpt") == 6
    report, resumed, rows = run_dpo(compose, tmp_path / "resumed", *settings)
    assert report["optimizer_steps"] == 8 and len(rows) == 2  # only the steps after the checkpoint ran
    for (name, a), (_, b) in zip(straight.named_parameters(), resumed.named_parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)


def test_invalid_settings_are_refused_when_parsed_and_the_module_takes_them_typed(
    tiny_model, objective_config, objective_settings
):
    with pytest.raises(ValueError, match="objective.loss_type='kto': expected one of apo_down, apo_zero, "):
        objective_config("dpo", lr=1.0, loss_type="kto")
    smoothing = "objective.label_smoothing applies to exo_pair, robust, sigmoid only, not 'hinge'"
    with pytest.raises(ValueError, match=smoothing):
        objective_config("dpo", lr=1.0, loss_type="hinge", label_smoothing=0.1)
    with pytest.raises(ValueError, match="objective.beta must be > 0, got 0.0"):
        objective_config("dpo", lr=1.0, beta=0.0)
    model, tokenizer = load(tiny_model())
    with pytest.raises(TypeError, match="DPOModule takes DPOSettings, got dict"):
        DPOModule(model, tokenizer, objective_settings("dpo"))


@pytest.mark.parametrize("model_name", ["tiny-qwen2", "tiny-llama", "qwen2.5-7b", "llama3.1-8b"])
def test_dpo_composes_with_each_model_family(compose, model_name):
    cfg = compose("objective=dpo", f"model={model_name}")
    assert cfg.objective.name == "dpo" and cfg.objective.beta == pytest.approx(0.1)
    assert cfg.objective.loss_type == "sigmoid"
    tiny = model_name.startswith("tiny")
    assert cfg.objective.lr == pytest.approx(1e-3 if tiny else 2e-5)  # tiny tuning vs RoleMRC Table 8


def compose_experiment(name: str):
    """An experiment as `python run.py experiment=<name>` builds it (its own hydra.run.dir included)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            return hydra_compose("config", overrides=[f"experiment={name}"], return_hydra_config=True)
    finally:
        GlobalHydra.instance().clear()


@pytest.mark.parametrize("model_name", ["qwen2.5-7b", "llama3.1-8b"])
def test_rolemrc_dpo_experiments_start_from_the_sft_run(model_name):
    dpo = compose_experiment(f"rolemrc_dpo_{model_name}")
    assert dpo.objective.name == "dpo" and dpo.model.name == model_name and dpo.data.name == "rolemrc_mix"
    assert (dpo.objective.beta, dpo.objective.lr, dpo.objective.loss_type) == (0.1, 2e-5, "sigmoid")
    # Root keys of an experiment (run_name, init_from, hydra.run.dir) need `experiment` after `_self_`
    # in conf/config.yaml's defaults list; with `_self_` last, config.yaml's own values win.
    assert dpo.run_name == f"rolemrc-dpo-{model_name}", "conf/config.yaml: list `experiment` after `_self_`"
    assert dpo.init_from == f"outputs/rolemrc-sft-{model_name}"
    assert dpo.hydra.run.dir == f"outputs/rolemrc-dpo-{model_name}"  # a fixed folder: a re-run resumes


# RoleMRC Table 8 (appendix C), per column: lr, batch size, accumulation, epochs, warmup, schedule, Adam eps;
# DPO beta 0.1; bf16 full fine-tuning on 4 GPUs.
TABLE_8 = {"sft": (1e-5, 8, 2, 1, 0.04, "cosine", 1e-8), "dpo": (2e-5, 8, 2, 1, 0.04, "cosine", 1e-8)}
# The authors' released scripts (training/sft_llama3.sh, dpo_llama3.sh, tasks.sh).
RELEASED = {"sft": (2e-5, 8, 2, 1, 0.04, "cosine", 1e-8), "dpo": (4e-7, 4, 4, 1, 0.1, "linear", 1e-8)}


@pytest.mark.slow
@pytest.mark.parametrize("model_name", ["qwen2.5-7b", "llama3.1-8b"])
@pytest.mark.parametrize(("variant", "expected"), [("", TABLE_8), ("_released", RELEASED)])
def test_rolemrc_experiments_follow_table_8_or_the_released_scripts(model_name, variant, expected):
    for stage in ("sft", "dpo"):
        cfg = compose_experiment(f"rolemrc_{stage}_{model_name}{variant}")
        o = cfg.objective
        got = (o.lr, o.batch_size, o.grad_accum, o.epochs, o.warmup_ratio, o.scheduler, o.adam_eps)
        assert got == expected[stage], (stage, variant)
        assert (o.name, cfg.model.name, o.weight_decay, cfg.model.lora) == (stage, model_name, 0.0, None)  # full FT
        assert cfg.trainer.precision == "bf16-mixed" and cfg.trainer.devices == 4  # 64 samples or pairs per step
        assert cfg.run_name == f"rolemrc-{stage}-{model_name}{variant.replace('_', '-')}"
    assert o.beta == 0.1 and o.loss_type == "sigmoid"
    assert cfg.init_from == f"outputs/rolemrc-sft-{model_name}{variant.replace('_', '-')}"


def test_llama_sft_experiment_writes_where_the_dpo_experiment_reads():
    sft, dpo = compose_experiment("rolemrc_sft_llama3.1-8b"), compose_experiment("rolemrc_dpo_llama3.1-8b")
    assert (sft.objective.name, sft.model.name) == ("sft", "llama3.1-8b")
    assert (sft.objective.lr, sft.objective.batch_size, sft.objective.grad_accum) == (1e-5, 8, 2)
    assert sft.hydra.run.dir == dpo.init_from, "conf/config.yaml: list `experiment` after `_self_`"


def run_pipeline(compose, folder: Path, *overrides: str) -> dict:
    """What `python run.py <overrides> hydra.run.dir=<folder>` runs, in-process."""
    from rpbench.pipeline import run

    cfg = compose(*overrides)
    with open_dict(cfg):
        del cfg["hydra"]
        cfg.paths.output_dir = str(folder)
    run(validate(cfg))
    return json.loads((folder / "metrics.json").read_text())


@pytest.mark.slow
def test_tiny_recipe_sft_then_dpo_then_evaluation(compose, tmp_path, sample_pairs):
    """The RoleMRC pipeline (experiments/rolemrc/README.md) on the tiny model and the bundled data."""
    common = ("model=tiny-llama", "logger=none", "trainer.enable_progress_bar=false")
    sft = run_pipeline(
        compose,
        tmp_path / "sft",
        "objective=sft",
        *common,
        "evaluator=none",
        "data.max_train_samples=24",
        "objective.epochs=4",
        "objective.lr=1e-2",
        "objective.batch_size=4",
        "objective.grad_accum=1",
    )
    dpo = run_pipeline(
        compose,
        tmp_path / "dpo",
        "objective=dpo",
        *common,
        f"init_from={tmp_path / 'sft'}",
        "objective.precompute_ref=true",
        "evaluator=rolemrc",
        "data.max_test_samples=6",
        "evaluator.generation.max_new_tokens=4",
        "evaluator.metrics=[bleu,rougeL]",
        "evaluator.bootstrap.n_resamples=20",
    )
    assert (sft["objective"], dpo["objective"]) == ("sft", "dpo")
    # the DPO run is named and reported after the run it starts from
    assert (dpo["run_name"], dpo["model"]) == (
        "dpo-tiny-llama-sample-from-sft-tiny-llama-sample",
        "tiny-llama from sft-tiny-llama-sample",
    )
    assert dpo["train"]["samples"]["train"] + dpo["train"]["samples"]["val"] == len(sample_pairs)
    before, after = dpo["train"]["held_out"]["before"], dpo["train"]["held_out"]["after"]
    # the DPO run starts from the SFT model: its chosen-reply NLL is the SFT model's, far below a random model's
    assert before["chosen_nll"] < 0.9 * math.log(4096)
    assert before["loss"] == pytest.approx(math.log(2)) and after["loss"] != pytest.approx(math.log(2))
    assert dpo["train"]["optimizer_steps"] == 8  # 55 training pairs, 16 per step, 2 epochs (tiny tuning)
    assert (tmp_path / "dpo" / "reference_logps.json").is_file() and (tmp_path / "dpo" / "model").is_dir()
    assert (tmp_path / "dpo" / "predictions.jsonl").read_text().count("\n") == 6
    assert "eval" in dpo


def test_ipo_loss_and_rewards_on_a_multi_turn_pair_count_only_the_reply(tiny_model, objective_config, sample_pairs):
    """IPO on a sample pair with an assistant turn in its prompt, recomputed from the template text alone."""
    model, tokenizer = load(tiny_model())
    settings = objective_config("dpo", lr=1e-3, beta=0.5, loss_type="ipo", precompute_ref=False)
    module = DPOModule(model, tokenizer, settings)
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(5)
        for param in model.parameters():
            param.add_(0.05 * torch.randn_like(param))
    pair = next(p for p in sample_pairs if any(t.role == "assistant" for t in p.prompt))
    samples, empty = DPOModule.render([pair], ChatRenderer(tokenizer, "<|im_end|>", 4096))
    batch = DPOModule.collate(samples, tokenizer.pad_token_id)
    prompt_text = tokenizer.apply_chat_template(
        [t.as_message() for t in pair.prompt], tokenize=False, add_generation_prompt=True
    )
    prompt_ids = tokenizer(prompt_text, add_special_tokens=False)["input_ids"]

    def reply_logps(net, reply: str) -> tuple[float, int]:
        reply_ids = tokenizer(reply + "<|im_end|>", add_special_tokens=False)["input_ids"]
        ids = torch.tensor([prompt_ids + reply_ids])
        logits = net(input_ids=ids).logits[0].float().log_softmax(-1)
        positions = range(len(prompt_ids), len(prompt_ids) + len(reply_ids))
        return sum(float(logits[p - 1, ids[0, p]]) for p in positions), len(reply_ids)

    with torch.no_grad():
        pc, nc = reply_logps(model, pair.chosen)
        pr, nr = reply_logps(model, pair.rejected)
        rc, _ = reply_logps(module.reference.model, pair.chosen)
        rr, _ = reply_logps(module.reference.model, pair.rejected)
        terms = module.pair_terms(batch)
    assert empty == [] and DPOModule.supervised_tokens(samples) == {"chosen": nc, "rejected": nr}
    chosen_reward, rejected_reward = 0.5 * (pc - rc) / nc, 0.5 * (pr - rr) / nr
    d = (pc - rc) / nc - (pr - rr) / nr
    assert terms["losses"].item() == pytest.approx((d - 1 / (2 * 0.5)) ** 2, rel=1e-4)
    assert terms["chosen_rewards"].item() == pytest.approx(chosen_reward, rel=1e-3, abs=1e-6)
    assert terms["rejected_rewards"].item() == pytest.approx(rejected_reward, rel=1e-3, abs=1e-6)
    assert terms["chosen_nll"].item() == pytest.approx(-pc / nc, rel=1e-5)
