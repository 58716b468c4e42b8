"""Extending rpbench from outside its files: a toy objective that trains two models and a toy model
family, registered here and run through Hydra composition and a real Lightning Trainer; and the typed
objective configs' errors."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf, open_dict
from transformers import MistralConfig, MistralForCausalLM

from rpbench.core.errors import ConfigError
from rpbench.models.families import FAMILIES, ModelFamily
from rpbench.models.families.base import DECODER_HOOK_PRESETS
from rpbench.models.families.qwen2 import Qwen2
from rpbench.models.forward import supervised_nll_sum
from rpbench.objectives.config import ObjectiveSettings
from rpbench.objectives.dpo import DPOSettings
from rpbench.objectives.grpo import GRPOSettings
from rpbench.objectives.registry import OBJECTIVES
from rpbench.objectives.sft import SFTModule
from rpbench.pipeline import run
from rpbench.probes import resolve_hook_points
from rpbench.validate import validate


class ToyMistral(ModelFamily):
    """Mistral-architecture tiny model with the ChatML tokenizer; one extra probe preset."""

    model_types = ("mistral",)
    tiny_architecture = (MistralConfig, MistralForCausalLM)
    tiny_tokenizer = Qwen2.tiny_tokenizer
    hook_presets = {**DECODER_HOOK_PRESETS, "gate": (r"layers\.\d+\.mlp\.gate_proj", "output")}


@dataclass(frozen=True, kw_only=True)
class TwoModelConfig(ObjectiveSettings):
    reasoner_weight: float

    def problems(self):
        found = super().problems()
        if self.reasoner_weight <= 0:
            found.append(("reasoner_weight", "a number > 0"))
        return found


class TwoModelSFT(SFTModule):
    """SFT of a policy and, on the same batches, a second model (``reasoner``) initialised differently."""

    config_class = TwoModelConfig

    @classmethod
    def models_to_build(cls, config, model_cfg):
        return {"policy": model_cfg, "reasoner": replace(model_cfg, init_seed=1)}

    def training_step(self, batch, batch_idx):
        policy_nll, tokens = supervised_nll_sum(self.model, batch)
        reasoner_nll, _ = supervised_nll_sum(self.extra_models["reasoner"], batch)
        loss = policy_nll + self.config.reasoner_weight * reasoner_nll
        self.log("train/loss", loss.detach() / max(tokens, 1), rank_zero_only=True)
        return loss * batch["loss_scale"] * self.backward_factor


TOY_OBJECTIVE = """\
defaults:
  - optim@_here_: default
  - _self_

name: toy_two_models
reasoner_weight: 0.5
lr: 1.0e-2
warmup_ratio: 0.0
epochs: 2
batch_size: 4
grad_accum: 1
"""

TOY_MODEL = """\
name: toy-mistral
name_or_path: tiny:toy_mistral
family: toy_mistral
gguf_file: null
instruct: false
quantization: null
dtype: float32
attn_implementation: sdpa
gradient_checkpointing: false
chat_template: null
end_of_turn: <|im_end|>
trust_remote_code: false
revision: null
lora: null
init_seed: 0
tiny: {hidden_size: 32, intermediate_size: 64, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2,
  vocab_size: 4096}
"""


@pytest.fixture(autouse=True)
def toy_extensions(registered):
    with registered((FAMILIES, "toy_mistral", ToyMistral), (OBJECTIVES, "toy_two_models", TwoModelSFT)):
        yield


def toy_config_dir(tmp_path: Path) -> Path:
    root = tmp_path / "conf"
    (root / "objective").mkdir(parents=True)
    (root / "model").mkdir()
    (root / "objective" / "toy_two_models.yaml").write_text(TOY_OBJECTIVE)
    (root / "model" / "toy-mistral.yaml").write_text(TOY_MODEL)
    return root


def initial_weights(seed: int) -> dict[str, torch.Tensor]:
    sizes = dict(OmegaConf.create(TOY_MODEL).tiny)
    tokenizer = ToyMistral.build_tiny_tokenizer(sizes.pop("vocab_size"))
    return ToyMistral.build_tiny_model(tokenizer, sizes, seed, "sdpa").state_dict()


@pytest.mark.slow
def test_a_toy_objective_trains_two_models_of_a_toy_family(compose, tmp_path):
    cfg = compose(
        f"hydra.searchpath=[file://{toy_config_dir(tmp_path)}]",
        "objective=toy_two_models",
        "model=toy-mistral",
        "evaluator=none",
        "logger=none",
    )
    with open_dict(cfg):  # what run.py hands the pipeline
        del cfg["hydra"]
        cfg.paths.output_dir = str(tmp_path / "out")
    assert cfg.objective.lr == 1e-2 and cfg.objective.adam_eps == 1e-8  # own value, shared default
    results = run(validate(cfg))
    out = tmp_path / "out"

    train_samples = results["train"]["samples"]["train"]
    assert results["train"]["optimizer_steps"] == 2 * math.ceil(train_samples / 4)

    checkpoint = torch.load(out / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    state = checkpoint["state_dict"]
    policy_keys = [k for k in state if k.startswith("model.")]
    reasoner_keys = [k for k in state if k.startswith("extra_models.reasoner.")]
    assert policy_keys and len(reasoner_keys) == len(policy_keys)
    optimised = sum(len(group["params"]) for group in checkpoint["optimizer_states"][0]["param_groups"])
    assert optimised == len(policy_keys) + len(reasoner_keys) - 2  # tied embeddings: lm_head is embed_tokens

    exported = {name: MistralForCausalLM.from_pretrained(out / "model" / name) for name in ("policy", "reasoner")}
    for name, seed in (("policy", 0), ("reasoner", 1)):
        trained, start = exported[name].state_dict(), initial_weights(seed)
        assert torch.equal(
            state[f"{'model' if name == 'policy' else 'extra_models.reasoner'}.model.norm.weight"],
            trained["model.norm.weight"],
        )
        moved = [k for k in start if not torch.equal(start[k], trained[k])]
        assert "model.layers.0.mlp.gate_proj.weight" in moved and "model.embed_tokens.weight" in moved, name
    policy_w = exported["policy"].state_dict()["model.layers.1.mlp.up_proj.weight"]
    assert not torch.equal(policy_w, exported["reasoner"].state_dict()["model.layers.1.mlp.up_proj.weight"])
    assert (out / "model" / "reasoner" / "tokenizer.json").is_file()

    points = resolve_hook_points(exported["policy"], "gate")  # the family's own preset
    assert [p.key for p in points] == ["model.layers.0.mlp.gate_proj", "model.layers.1.mlp.gate_proj"]


def test_typed_configs_reject_unknown_missing_and_bad_values(objective_settings):
    sft = objective_settings("sft")
    with pytest.raises(
        ConfigError,
        match=r"objective.lr_decay: unknown key \(did you mean objective.weight_decay\?\); valid keys: .*, lr, ",
    ):
        ObjectiveSettings.parse({**sft, "lr_decay": 0.1}, "objective")
    without_lr = {k: v for k, v in sft.items() if k != "lr"}
    with pytest.raises(ConfigError, match=r"objective.lr: missing \(it has no default in code"):
        ObjectiveSettings.parse(without_lr, "objective")
    with pytest.raises(ConfigError, match=r"objective.batch_size=0: expected an integer >= 1"):
        ObjectiveSettings.parse({**sft, "batch_size": 0}, "objective")
    with pytest.raises(ConfigError, match=r"objective.mu=0: expected an integer >= 1"):
        GRPOSettings.parse(objective_settings("grpo", mu=0), "objective")
    with pytest.raises(ConfigError, match=r"objective.loss_type='kto': expected one of apo_down, apo_zero, "):
        DPOSettings.parse(objective_settings("dpo", loss_type="kto"), "objective")
    with pytest.raises(ConfigError, match=r"objective.beta: unknown key"):  # DPO's key on SFT
        ObjectiveSettings.parse(objective_settings("sft", beta=0.1), "objective")
    with pytest.raises(ConfigError, match=r"objective.reasoner_weight=0.0: expected a number > 0"):  # a plugin's own
        TwoModelConfig.parse({**sft, "reasoner_weight": 0}, "objective")


def test_each_default_comes_from_the_yaml(objective_settings):
    """The values the code once fell back to differently (GRPO clip-higher, the shared schedule)."""
    grpo = GRPOSettings.parse(objective_settings("grpo"), "objective")
    assert (grpo.epsilon_low, grpo.epsilon_high) == (0.2, 0.28)
    dpo = DPOSettings.parse(objective_settings("dpo"), "objective")
    assert (dpo.scheduler, dpo.adam_betas, dpo.adam_eps) == ("cosine", (0.9, 0.999), 1e-8)  # optim/default.yaml
    assert (dpo.lr, dpo.warmup_ratio) == (1e-3, 0.0)  # the tiny model's tuning over dpo.yaml


def test_validation_names_an_unknown_objective_key(compose):
    with pytest.raises(ConfigError, match=r"objective.gamma: unknown key; valid keys: "):
        validate(compose("+objective.gamma=0.9"))


def test_a_model_config_must_name_a_registered_family(tiny_model):
    from rpbench.models import load

    with pytest.raises(ValueError, match=r"unknown model family 'mamba'; registered: .*llama, qwen2"):
        load(tiny_model(name_or_path="some/model", family="mamba"))
