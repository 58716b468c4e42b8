"""The R-EMID estimator pair: named at startup, resolved from a run folder or a model entry, adapters merged."""

import json

import pytest
import torch

from rpbench.data.errors import ConfigError
from rpbench.eval.generalization.estimator import load_estimator, resolve_spec
from rpbench.models import load
from rpbench.models.config_tree import compose_model_config
from rpbench.validate import validate


def test_real_data_without_an_estimator_stops_at_startup_naming_both_settings(compose):
    with pytest.raises(ConfigError) as error:
        validate(compose("objective=none", "evaluator=rpgbench", "data=rpgbench"))
    message = str(error.value)
    assert "evaluator.critic is not set" in message and "evaluator.reasoner is not set" in message
    validate(compose("objective=none", "evaluator=rpgbench", "data=rpgbench", "evaluator.generalization.enabled=false"))
    cfg = compose("objective=none", "evaluator=rpgbench", "data=sample_rpgbench")
    assert (cfg.evaluator.critic, cfg.evaluator.reasoner) == ("tiny-qwen3", "tiny-qwen3")
    validate(cfg)


def test_a_recipe_names_the_corl_run_and_a_missing_one_is_named(compose, tmp_path):
    cfg = compose("experiment=rpgbench_sft_qwen3-4b", f"paths.output_root={tmp_path}")
    assert cfg.evaluator.critic == str(tmp_path / "rpgbench-corl-qwen3-4b") == cfg.evaluator.reasoner
    with pytest.raises(ConfigError, match="evaluator.critic=.*rpgbench-corl-qwen3-4b: no run folder there"):
        validate(cfg)


def test_self_is_a_critic_only_and_labelled():
    assert "not comparable across models" in resolve_spec("critic", "self", None).description
    with pytest.raises(ConfigError, match="never from the evaluated model"):
        resolve_spec("reasoner", "self", None)


def test_a_corl_run_folder_gives_its_dialogue_model_as_critic_and_reasoner_as_reasoner(tmp_path):
    run = tmp_path / "corl-run"
    for name in ("dialogue", "reasoner"):
        (run / "model" / name).mkdir(parents=True)
        (run / "model" / name / "config.json").write_text("{}")
    (run / "config.yaml").write_text(json.dumps({"model": {**compose_model_config("tiny-qwen3"), "lora": {"r": 4}}}))
    critic, reasoner = resolve_spec("critic", str(run), None), resolve_spec("reasoner", str(run), None)
    assert critic.model_cfg["name_or_path"] == str(run / "model" / "dialogue") and critic.model_cfg["lora"] is None
    assert reasoner.model_cfg["name_or_path"] == str(run / "model" / "reasoner")
    assert critic.description == "critic of run corl-run" and str(tmp_path) not in critic.description
    assert resolve_spec("critic", "Qwen/Qwen3-8B", None).model_cfg["name"] == "qwen3-8b"
    with pytest.raises(ConfigError, match="no run folder there"):
        resolve_spec("critic", str(tmp_path / "missing"), None)


def test_an_adapter_is_merged_into_the_critic(tmp_path):
    from peft import LoraConfig, get_peft_model

    cfg = compose_model_config("tiny-qwen3")
    base, _ = load(cfg)
    peft_model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    with torch.no_grad():
        for name, parameter in peft_model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0, 0.5)  # a trained adapter: B is no longer zero
    peft_model.save_pretrained(tmp_path / "adapter")
    ids = torch.tensor([[1, 5, 9, 42]])
    with torch.no_grad():
        expected = peft_model(input_ids=ids).logits
    merged, _ = load_estimator(resolve_spec("critic", "tiny-qwen3", str(tmp_path / "adapter")), "cpu")
    plain, _ = load_estimator(resolve_spec("critic", "tiny-qwen3", None), "cpu")
    with torch.no_grad():
        assert torch.allclose(merged(input_ids=ids).logits, expected, atol=1e-5)
        assert not torch.allclose(plain(input_ids=ids).logits, expected, atol=1e-3)
    with pytest.raises(ConfigError, match="no adapter_config.json"):
        load_estimator(resolve_spec("critic", "tiny-qwen3", str(tmp_path)), "cpu")
