"""The R-EMID estimator pair: named at startup, resolved from a run folder or a model entry, adapters merged."""

import json
import shutil
from pathlib import Path

import pytest
import torch

from rpbench.core.errors import ConfigError
from rpbench.core.typed import plain
from rpbench.eval.generalization.estimator import load_estimator, provenance, resolve_spec
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
    assert "not comparable across models" in resolve_spec("critic", "self", ()).description
    with pytest.raises(ConfigError, match="never from the evaluated model"):
        resolve_spec("reasoner", "self", ())
    with pytest.raises(ConfigError, match="plain critic is a fixed model"):
        resolve_spec("plain_critic", "self", ())


@pytest.fixture(scope="module")
def saved_tiny(tmp_path_factory) -> Path:
    """A tiny model saved as an export writes it: config.json, model.safetensors, the tokenizer's files."""
    folder = tmp_path_factory.mktemp("saved") / "model"
    model, tokenizer = load(compose_model_config("tiny-qwen3"))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


LORA = {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": None}


def corl_run(folder: Path, saved: Path) -> Path:
    """A CoRL run folder: its config.yaml and a copy of ``saved`` as each exported model."""
    for name in ("dialogue", "reasoner"):
        shutil.copytree(saved, folder / "model" / name)
    (folder / "config.yaml").write_text(
        json.dumps({"model": {**plain(compose_model_config("tiny-qwen3")), "lora": LORA}})
    )
    return folder


def test_a_corl_run_folder_gives_its_dialogue_model_as_critic_and_reasoner_as_reasoner(tmp_path, saved_tiny):
    run = corl_run(tmp_path / "corl-run", saved_tiny)
    critic, reasoner = resolve_spec("critic", str(run), ()), resolve_spec("reasoner", str(run), ())
    assert critic.model_cfg.name_or_path == str(run / "model" / "dialogue") and critic.model_cfg.lora is None
    assert reasoner.model_cfg.name_or_path == str(run / "model" / "reasoner")
    assert critic.description == "critic of run corl-run" and str(tmp_path) not in critic.description
    assert resolve_spec("critic", "Qwen/Qwen3-8B", ()).model_cfg.name == "qwen3-8b"
    with pytest.raises(ConfigError, match="no run folder there"):
        resolve_spec("critic", str(tmp_path / "missing"), ())


def trained_adapter(base, folder, seed: int, **lora):
    """A LoRA adapter on ``base`` with non-zero B (a trained one), saved to ``folder``; the base is left as it was."""
    from peft import LoraConfig, get_peft_model

    peft_model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, **lora))
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in peft_model.named_parameters():
            if "lora_B" in name or "lora_magnitude" in name:
                parameter.copy_(parameter + torch.randn(parameter.shape, generator=generator) * 0.5)
    peft_model.save_pretrained(folder)
    return peft_model.unload()


def merged_by_hand(cfg, adapters):
    """The peer: peft's own merge of each adapter in turn, as the authors' REMID_estimation.py does."""
    from peft import PeftModel

    model, _ = load(cfg)
    for adapter in adapters:
        model = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
    return model.eval()


def test_adapters_are_merged_in_the_order_given(tmp_path):
    # the second adapter is a DoRA one (its merge normalises by the weight it is merged into), so the order
    # matters: [first, second] must equal peft's merges in that order, not the reverse, not the second alone
    cfg = compose_model_config("tiny-qwen3")
    base, _ = load(cfg)
    first, second = tmp_path / "sft", tmp_path / "grpo"
    base = trained_adapter(base, first, 0, target_modules=["q_proj", "v_proj"])
    trained_adapter(base, second, 1, target_modules=["q_proj", "o_proj"], use_dora=True)
    ids = torch.tensor([[1, 5, 9, 42, 7]])

    def logits(model):
        with torch.no_grad():
            return model(input_ids=ids).logits

    ours, _ = load_estimator(resolve_spec("critic", "tiny-qwen3", [str(first), str(second)]), "cpu")
    expected = logits(merged_by_hand(cfg, [first, second]))
    assert torch.allclose(logits(ours), expected, atol=1e-5)
    for other in ([second, first], [second], []):
        assert not torch.allclose(logits(merged_by_hand(cfg, other)), expected, atol=1e-3)
    spec = resolve_spec("critic", "tiny-qwen3", [str(first), str(second)])
    assert spec.description == "model=tiny-qwen3 + LoRA adapter sft + LoRA adapter grpo"
    with pytest.raises(ConfigError, match=r"critic_adapters\[0\]=.*: no adapter_config.json"):
        load_estimator(resolve_spec("critic", "tiny-qwen3", [str(tmp_path)]), "cpu")


def test_provenance_records_each_adapter_digest_in_merge_order(tmp_path):
    import hashlib

    for name, text in (("sft", "first"), ("grpo", "second")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "adapter_config.json").write_text(text)

    # by hand: sha256 over "<file name>\0<sha256 of its bytes>\n" per file, by name
    def by_hand(text):
        return hashlib.sha256(
            f"adapter_config.json\0{hashlib.sha256(text.encode()).hexdigest()}\n".encode()
        ).hexdigest()

    spec = resolve_spec("critic", "tiny-qwen3", [str(tmp_path / "grpo"), str(tmp_path / "sft")])
    record = provenance(spec)
    assert record["adapters"] == [
        {"order": 0, "name": "grpo", "sha256": by_hand("second")},
        {"order": 1, "name": "sft", "sha256": by_hand("first")},
    ]
    assert record["weights_sha256"] is None and str(tmp_path) not in json.dumps(record)
    assert provenance(resolve_spec("critic", "self", ()))["adapters"] == []


def test_a_local_model_folder_is_a_critic_with_its_family_settings_and_digest(tmp_path):
    cfg = compose_model_config("tiny-qwen3")
    model, tokenizer = load(cfg)
    folder = tmp_path / "merged"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    spec = resolve_spec("critic", str(folder), ())
    assert spec.model_cfg.name_or_path == str(folder) and spec.model_cfg.family == "qwen3"
    assert spec.model_cfg.chat_template == compose_model_config("qwen3-8b").chat_template
    assert spec.description.startswith("model folder merged (loaded as model=qwen3-")
    loaded, _ = load_estimator(spec, "cpu")  # the folder's weights, in the entry's dtype
    saved = model.state_dict()
    for name, weight in loaded.state_dict().items():
        assert torch.equal(weight, saved[name].to(weight.dtype)), name
    assert len(provenance(spec)["weights_sha256"]) == 64
    (folder / "config.json").write_text(json.dumps({"model_type": "gpt2"}))  # transformers knows it, no rpbench family
    with pytest.raises(ConfigError, match="model_type='gpt2' with no instruct conf/model entries"):
        resolve_spec("critic", str(folder), ())


def test_adapter_lists_and_a_plain_critic_are_checked_at_startup(compose, tmp_path):
    # the README's two-adapter command, composed: a missing adapter is named with its list index
    (tmp_path / "sft").mkdir()
    (tmp_path / "sft" / "adapter_config.json").write_text("{}")
    base = ("objective=none", "evaluator=rpgbench", "data=sample_rpgbench", "evaluator.critic=qwen3-8b")
    cfg = compose(*base, f"evaluator.critic_adapters=[{tmp_path / 'sft'},{tmp_path / 'grpo'}]")
    assert list(cfg.evaluator.critic_adapters) == [str(tmp_path / "sft"), str(tmp_path / "grpo")]
    with pytest.raises(ConfigError, match=r"evaluator.critic_adapters\[1\]=.*grpo: no adapter_config.json"):
        validate(cfg)
    assert compose(*base).evaluator.plain_critic is None
    with pytest.raises(ConfigError, match="evaluator.plain_critic=nowhere: no run folder there"):
        validate(compose(*base, "evaluator.plain_critic=nowhere"))


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
    resolve_spec("critic", str(run), ())  # whole, it resolves
    critic = run / "model" / "dialogue"
    breaks(critic / file)
    with pytest.raises(ConfigError) as refused:
        resolve_spec("critic", str(run), ())
    message = str(refused.value)
    assert message.startswith(f"evaluator.critic={run}: its exported model cannot load") and said in message
    assert f"{critic / named if named else critic}: " in message
    resolve_spec("reasoner", str(run), ())  # the reasoner's own folder is whole
    with pytest.raises(ConfigError) as refused:
        resolve_spec("critic", str(critic), ())  # the same folder given as a pre-merged model
    assert str(refused.value).startswith(f"evaluator.critic={critic}: this model folder cannot load") and said in str(
        refused.value
    )
