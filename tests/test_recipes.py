"""The R-EMID paper's RPGBench recipes (conf/experiment/rpgbench_*): composed with Hydra, their key settings."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from rpbench.core.paths import CONF_DIR

MODELS = {"qwen3-4b": "Qwen/Qwen3-4B", "llama3-8b": "meta-llama/Meta-Llama-3-8B"}
RECIPES = ("sft", "da", "thinking_sft", "rl", "thinking_rl")
STARTS_FROM = {"rl": "sft", "thinking_rl": "thinking_sft"}  # GRPO on top of that recipe's model
CASES = [(recipe, model) for model in MODELS for recipe in RECIPES]


@pytest.fixture(scope="module")
def composed_recipe(check_config):
    def composed_recipe(compose, recipe: str, model: str):
        cfg = compose(f"experiment=rpgbench_{recipe}_{model}")
        check_config(cfg)
        return {
            k: OmegaConf.to_container(cfg[k], resolve=True) if OmegaConf.is_config(cfg[k]) else cfg[k]
            for k in cfg
            if k != "hydra"
        }

    return composed_recipe


@pytest.mark.slow
@pytest.mark.parametrize(("recipe", "model"), CASES, ids=[f"{r}_{m}" for r, m in CASES])
def test_recipe_composes_with_its_settings(compose, recipe, model, composed_recipe):
    cfg = composed_recipe(compose, recipe, model)
    assert cfg["run_name"] == f"rpgbench-{recipe.replace('_', '-')}-{model}"
    own = OmegaConf.load(CONF_DIR / "experiment" / f"rpgbench_{recipe}_{model}.yaml")
    # A fixed folder, so init_from finds the run a recipe starts from.
    assert OmegaConf.to_container(own)["hydra"]["run"]["dir"] == "${paths.output_root}/${run_name}"
    assert (cfg["data"]["name"], cfg["evaluator"]["name"]) == ("rpgbench", "rpgbench")
    assert cfg["model"]["name_or_path"] == MODELS[model] and cfg["model"]["lora"]["r"] == 16
    thinking = recipe.startswith("thinking")
    assert cfg["data"]["reasoning_in_target"] is thinking
    assert cfg["data"]["files"]["augment"] == ("rpgbench_augment.json" if recipe == "da" else None)
    template = {"qwen3-4b": "qwen3-thinking" if thinking else "qwen3", "llama3-8b": "llama3"}[model]
    assert cfg["model"]["chat_template"] == template
    assert cfg["evaluator"]["generation"]["max_new_tokens"] == (512 if thinking else 256)
    assert cfg["evaluator"]["generation"]["temperature"] == 0.0  # greedy, as the authors evaluated
    objective = cfg["objective"]
    if recipe in STARTS_FROM:
        assert cfg["init_from"].endswith(f"/rpgbench-{STARTS_FROM[recipe].replace('_', '-')}-{model}")
        assert objective["name"] == "grpo"
        assert objective["lr"] == pytest.approx(1e-5) and objective["num_generations"] == 8
        assert objective["beta"] == 0.0 and objective["epsilon_low"] == objective["epsilon_high"] == 0.2
        assert objective["temperature"] == 1.0 and objective["mu"] == 1
        assert objective["batch_size"] * cfg["trainer"]["devices"] == 8  # 8 prompts x G 8 = 64 per step
        assert objective["max_completion_length"] == (512 if thinking else 256)
    else:
        assert cfg["init_from"] is None and objective["name"] == "sft"
        assert objective["lr"] == pytest.approx(2e-4) and objective["epochs"] == 1


def test_every_rpgbench_recipe_file_is_covered():
    ours = {f"rpgbench_{recipe}_{model}" for recipe, model in CASES}
    files = {p.stem for p in (CONF_DIR / "experiment").glob("rpgbench_*.yaml")}
    assert ours <= files
    assert files - ours <= {f"rpgbench_corl_{model}" for model in MODELS}  # written by the CoRL work
