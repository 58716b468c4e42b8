"""DPO and GRPO from random weights or a base model warn (log line and metrics.json), otherwise not; records
an objective does not train on are refused by name once read."""

from __future__ import annotations

import json
import logging

import pytest

from rpbench.core.errors import ConfigError
from rpbench.pipeline import read_data
from rpbench.training.starting_point import check_trained_records, untuned_start_warning
from rpbench.validate import validate


@pytest.mark.slow
@pytest.mark.parametrize(
    ("overrides", "warns"),
    [
        (["objective=dpo"], "random weights"),
        (["objective=grpo", "model=tiny-llama"], "random weights"),
        (["objective=dpo", "model=qwen2.5-7b"], "a base (not instruction-tuned) model"),
        (["objective=dpo", "model=qwen2.5-7b-instruct"], None),
        (["objective=dpo", "model.instruct=true"], None),
        (["objective=grpo", "init_from={sft_run}"], None),
        (["objective=sft"], None),
    ],
)
def test_the_rule(compose, tmp_path, overrides, warns):
    (tmp_path / "sft-run" / "model").mkdir(parents=True)  # an earlier run's saved model
    cfg = compose(*(o.format(sft_run=tmp_path / "sft-run") for o in overrides))
    warning = untuned_start_warning(validate(cfg).training)
    assert (warning is None) if warns is None else (warns in warning and "init_from=" in warning)


@pytest.mark.slow
def test_dpo_from_the_tiny_model_warns_once_and_records_it(tmp_path, caplog, run_in_process):
    """What run.py runs, in-process: the log records are what its run.log would hold."""
    out = tmp_path / "run"
    with caplog.at_level(logging.INFO):
        run_in_process(out, "objective=dpo", "trainer.max_steps=1", "evaluator=none", "save_model=false")
    warnings = json.loads((out / "metrics.json").read_text())["warnings"]
    assert len(warnings) == 1 and warnings[0].startswith("objective=dpo starts from model=tiny-qwen2, random weights")
    assert caplog.text.count(warnings[0]) == 1


@pytest.mark.slow
@pytest.mark.parametrize(
    ("overrides", "refused"),
    [
        (["objective=sft", "data=sample_conversation", "judge=local"], "EvalExample"),
        (["objective=grpo", "data=sample_conversation", "judge=local", "env=conversation"], None),
        (["objective=grpo", "data=sample_conversation", "judge=local"], None),  # a scenario's prompt, no reference
        (["objective=dpo"], None),
        (["objective=sft"], None),
    ],
)
def test_records_of_a_type_the_objective_does_not_render_are_refused(compose, overrides, refused):
    spec = validate(compose(*overrides, "evaluator=none"))
    training = spec.training
    examples = read_data(spec.data, training.split, need_test=False)[0][training.split]
    if refused is None:
        check_trained_records(training, examples)
        return
    with pytest.raises(ConfigError, match=rf"objective={training.objective.name} trains on .*holds {refused} records"):
        check_trained_records(training, examples)
