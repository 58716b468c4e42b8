"""The R-EMID estimator pair: named at startup, resolved from a run folder or a model entry, adapters merged."""

import json
import shutil
from pathlib import Path

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


@pytest.fixture(scope="module")
def saved_tiny(tmp_path_factory) -> Path:
    """A tiny model saved as an export writes it: config.json, model.safetensors, the tokenizer's files."""
    folder = tmp_path_factory.mktemp("saved") / "model"
    model, tokenizer = load(compose_model_config("tiny-qwen3"))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def corl_run(folder: Path, saved: Path) -> Path:
    """A CoRL run folder: its config.yaml and a copy of ``saved`` as each exported model."""
    for name in ("dialogue", "reasoner"):
        shutil.copytree(saved, folder / "model" / name)
    (folder / "config.yaml").write_text(json.dumps({"model": {**compose_model_config("tiny-qwen3"), "lora": {"r": 4}}}))
    return folder


def test_a_corl_run_folder_gives_its_dialogue_model_as_critic_and_reasoner_as_reasoner(tmp_path, saved_tiny):
    run = corl_run(tmp_path / "corl-run", saved_tiny)
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


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-100])


def _set(key: str, value) -> callable:
    def edit(path: Path) -> None:
        path.write_text(json.dumps({**json.loads(path.read_text()), key: value}))

    return edit


def _header_broken(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[:8] + b"!" + data[9:])  # the header's length kept, its JSON broken


BROKEN = {  # what breaks the exported critic: (file, how, the file the error names ("": the folder), what it says)
    "config cut off": ("config.json", lambda p: p.write_text(p.read_text()[:40]), "config.json", "not valid JSON"),
    "unknown model type": ("config.json", _set("model_type", "qwen99"), "config.json", "model_type='qwen99' is not"),
    "unknown architecture": ("config.json", _set("architectures", ["Qwen99LM"]), "config.json", "['Qwen99LM'] are not"),
    "weights missing": ("model.safetensors", Path.unlink, "", "no weights"),
    "weights cut short": ("model.safetensors", _truncate, "model.safetensors", "cut short"),
    "weights header broken": ("model.safetensors", _header_broken, "model.safetensors", "header is unreadable"),
    "no tokenizer": ("tokenizer.json", Path.unlink, "", "no tokenizer"),
}


@pytest.mark.parametrize("kind", BROKEN)
def test_a_broken_exported_critic_is_refused_at_startup_naming_its_file(kind, tmp_path, saved_tiny):
    file, breaks, named, said = BROKEN[kind]
    run = corl_run(tmp_path / "corl-run", saved_tiny)
    resolve_spec("critic", str(run), None)  # whole, it resolves
    critic = run / "model" / "dialogue"
    breaks(critic / file)
    with pytest.raises(ConfigError) as refused:
        resolve_spec("critic", str(run), None)
    message = str(refused.value)
    assert message.startswith(f"evaluator.critic={run}: its exported model cannot load") and said in message
    assert f"{critic / named if named else critic}: " in message
    resolve_spec("reasoner", str(run), None)  # the reasoner's own folder is whole
