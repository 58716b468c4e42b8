"""What only a GPU shows: bf16 training and DeepSpeed ZeRO through the real entry point (skipped on CPU)."""

from __future__ import annotations

import json

import pytest

from test_run import FAST, run

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("trainer", ["gpu", "deepspeed_zero2", "deepspeed_zero3"])
def test_sft_trains_on_one_gpu(tmp_path, trainer):
    out = tmp_path / trainer
    result = run(f"hydra.run.dir={out}", *FAST, f"trainer={trainer}", "trainer.devices=1", "logger=none")
    assert result.returncode == 0, result.stderr[-3000:]
    held_out = json.loads((out / "metrics.json").read_text())["train"]["held_out"]
    assert held_out["after"]["loss"] < held_out["before"]["loss"]
    assert (out / "model" / "config.json").exists()
