"""A data config names its default evaluator (its defaults list), and an evaluator chosen on the command
line or by an experiment wins: real Hydra composition of every data option."""

from __future__ import annotations

import pytest

from rpbench.core.paths import CONF_DIR

# Each data option's evaluator (the benchmark its records come from).
EVALUATOR_OF = {
    "characterbench": "characterbench",
    "charactereval": "charactereval",
    "characterllm": "characterllm",
    "coser": "coser",
    "rmtbench": "rmtbench",
    "rm_bench": "rm_bench",
    "conversation": "conversation",
    "custom": "rolemrc",
    "mmrole": "mmrole",
    "mmrole_reviews": "mmrole_rm",
    "mmrole_rm": "mmrole_rm",
    "rolebench_instruction": "rolebench",
    "rolebench_role": "rolebench",
    "rolemrc": "rolemrc",
    "rolemrc_mix": "rolemrc",
    "rpgbench": "rpgbench",
    "sample": "rolemrc",
    "sample_characterllm": "characterllm",
    "sample_coser": "coser",
    "sample_conversation": "conversation",
    "sample_conversation_adversarial": "conversation_adversarial",
    "session_pairs": "none",
    "sample_mmrole": "mmrole",
    "sample_mmrole_reviews": "mmrole_rm",
    "sample_mmrole_rm": "mmrole_rm",
    "sample_rolebench": "rolebench",
    "sample_rpgbench": "rpgbench",
}


def test_every_data_option_has_an_evaluator_here():
    assert sorted(p.stem for p in (CONF_DIR / "data").glob("*.yaml")) == sorted(EVALUATOR_OF)


@pytest.mark.slow
def test_a_data_config_chooses_its_evaluator():
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        chosen = {data: compose("config", [f"data={data}"]).evaluator.name for data in EVALUATOR_OF}
    assert chosen == EVALUATOR_OF


def test_the_command_line_and_experiments_choose_over_the_data_config(compose):
    assert compose("data=sample_mmrole", "evaluator=none").evaluator.name == "none"
    assert compose("evaluator=general", "data=mmrole").evaluator.name == "general"
    # mmrole_agent sets data=mmrole and evaluator=mmrole; the command line still wins
    assert compose("experiment=mmrole_agent", "evaluator=rolemrc").evaluator.name == "rolemrc"
    # an external evaluation of RoleMRC's replaces the sample data's evaluator
    assert compose("external=general").evaluator.name == "general"
