"""The exported model/: its model card, the LoRA adapter alone, and the Hub upload settings."""

from __future__ import annotations

import json

import pytest
import torch
from omegaconf import OmegaConf

from rpbench.core.errors import ConfigError
from rpbench.export.hub import upload_arguments
from rpbench.training.settings import HubSettings
from rpbench.validate import validate

LORA = "model.lora={r:4,alpha:8,dropout:0.0,target_modules:[q_proj,v_proj]}"


@pytest.mark.slow
def test_lora_run_exports_a_card_and_an_adapter_equal_to_the_merged_model(tmp_path, compose, run_in_process):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from rpbench.models import load
    from rpbench.models.config_tree import compose_model_config

    out = tmp_path / "run"
    run_in_process(
        out,
        "trainer.max_steps=2",
        "trainer.enable_progress_bar=false",
        "data.max_test_samples=4",
        "evaluator.generation.max_new_tokens=8",
        "objective.lr=0.05",
        LORA,
        "export.lora_adapter=true",
    )
    metrics = json.loads((out / "metrics.json").read_text())
    card = (out / "model" / "README.md").read_text()
    assert "objective `sft`, from `tiny:qwen2` (model config `tiny-qwen2`), on data `sample`" in card
    assert "| lr | 0.05 |" in card and "| max_steps | 2 |" in card and "| seed | 42 |" in card
    assert "train: `pkg://rpbench/resources/sample/rolemrc/train-sft.jsonl`" in card
    after = metrics["train"]["held_out"]["after"]["loss"]
    assert f"| after training | {after:.4f} |" in card
    assert "4 test records; generated now 4" in card  # rewritten after evaluation, with its metrics
    assert "base_model:" not in card  # random weights have no hub id to name
    assert "hub_commit" not in metrics  # push_to_hub is off by default: nothing uploaded (tests run offline)

    base, tokenizer = load(compose_model_config("tiny-qwen2"))
    adapted = PeftModel.from_pretrained(base, str(out / "model" / "adapter")).eval()
    merged = AutoModelForCausalLM.from_pretrained(out / "model").eval()
    ids = torch.tensor([tokenizer.encode("Hello there, who are you?")])
    with torch.no_grad():
        adapted_logits = adapted(input_ids=ids).logits
        merged_logits = merged(input_ids=ids).logits
        with adapted.disable_adapter():
            base_logits = adapted(input_ids=ids).logits
    torch.testing.assert_close(adapted_logits, merged_logits, rtol=1e-4, atol=1e-4)
    assert (merged_logits - base_logits).abs().max() > 1e-3  # training moved the adapter off zero


def test_push_to_hub_is_checked_at_startup_and_names_the_token_variable_not_its_value(compose, monkeypatch):
    monkeypatch.delenv("RPBENCH_TEST_TOKEN", raising=False)
    cfg = compose("export.push_to_hub=true", "export.hub.token_env=RPBENCH_TEST_TOKEN", "save_model=false")
    with pytest.raises(ConfigError) as error:
        validate(cfg)
    message = str(error.value)
    assert "export.hub.repo_id=None" in message and "save_model=true" in message
    assert "RPBENCH_TEST_TOKEN" in message
    monkeypatch.setenv("RPBENCH_TEST_TOKEN", "hf_secret_value")
    validate(compose("export.push_to_hub=true", "export.hub.token_env=RPBENCH_TEST_TOKEN", "export.hub.repo_id=me/m"))


def test_push_is_off_by_default_and_uploads_the_run_model_folder(compose, tmp_path):
    cfg = compose()
    assert cfg.export.push_to_hub is False and cfg.export.hub.private is True
    validate(cfg)  # no token needed when nothing is pushed
    hub = HubSettings.parse({**OmegaConf.to_container(cfg.export.hub), "repo_id": "me/my-model"}, "export.hub")
    assert upload_arguments(tmp_path / "model", hub, "sft-tiny-qwen2-sample") == {
        "folder_path": str(tmp_path / "model"),
        "repo_id": "me/my-model",
        "repo_type": "model",
        "commit_message": "rpbench run sft-tiny-qwen2-sample",
    }


def test_the_card_names_local_files_and_models_without_this_machines_paths(compose, tmp_path):
    from rpbench.export.model_card import card_text

    private = tmp_path / "home" / "alice" / "secret"
    (private / "base-model").mkdir(parents=True)
    cfg = compose(
        "data=custom",
        f"data.files.train={private / 'my.jsonl'}",
        f"data.files.test={{chat: [{private / 'a_test.jsonl'}, {private / 'b_test.jsonl'}]}}",
        "data.files.pairs=hf://org/pairs:train",
        f"model.name_or_path={private / 'base-model'}",
    )
    card = card_text(validate(cfg).training, {"run_name": "r", "model": "m"}, tmp_path / "model")
    assert str(tmp_path) not in card and "alice" not in card
    assert "- train: `my.jsonl`" in card and "- test.chat: `a_test.jsonl, b_test.jsonl`" in card
    assert "- pairs: `hf://org/pairs:train`" in card  # a hub name is no local path
    assert "from `base-model`" in card and "base_model:" not in card  # a local folder has no hub id
    hub = compose("model=qwen2.5-7b-instruct")
    card = card_text(validate(hub).training, {"run_name": "r", "model": "m"}, tmp_path / "model")
    assert f"base_model: {hub.model.name_or_path}" in card
