"""DPO and GRPO from random weights or a base model warn (log line and metrics.json), otherwise not."""

from __future__ import annotations

import json
import logging

import pytest

from conftest import run_in_process
from rpbench.training.starting_point import untuned_start_warning
from rpbench.validate import validate


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


def test_dpo_from_the_tiny_model_warns_once_and_records_it(tmp_path, caplog):
    """What run.py runs, in-process: the log records are what its run.log would hold."""
    out = tmp_path / "run"
    with caplog.at_level(logging.INFO):
        run_in_process(out, "objective=dpo", "trainer.max_steps=1", "evaluator=none", "save_model=false")
    warnings = json.loads((out / "metrics.json").read_text())["warnings"]
    assert len(warnings) == 1 and warnings[0].startswith("objective=dpo starts from model=tiny-qwen2, random weights")
    assert caplog.text.count(warnings[0]) == 1
