"""Run names tell runs apart: environment, probe, judge, data files given on the command line, the run started
from; a short run (a debug preset, trainer.fast_dev_run) ends with its mark and says why it is short."""

from __future__ import annotations

import pytest


@pytest.mark.slow
@pytest.mark.parametrize(
    ("overrides", "name"),
    [
        ((), "sft-tiny-qwen2-sample"),
        (("objective=none", "probe=topk_freq"), "none-tiny-qwen2-sample-probe-topk_freq"),
        (("objective=none", "probe=compare", "probe.runs=[a,b]"), "none-tiny-qwen2-sample-probe-compare"),
        (("objective=none", "judge=local"), "none-tiny-qwen2-sample-judge-local"),
        (
            ("objective=grpo", "env=conversation", "data=sample_conversation", "judge=local"),
            "grpo-tiny-qwen2-sample_conversation-env-conversation-judge-local",
        ),
        (("data.files.train=/data/my_chats.jsonl",), "sft-tiny-qwen2-sample-my_chats"),
        (("objective=dpo", "data.files.pairs=prefs.v2.json"), "dpo-tiny-qwen2-sample-prefs.v2"),
        (("run_name=mine", "probe=topk_freq"), "mine"),  # a name given is kept
    ],
)
def test_run_name_carries_what_distinguishes_the_run(compose, overrides, name):
    cfg = compose(*overrides)
    assert cfg.run_name == name


def test_run_name_names_the_run_it_starts_from(compose, tmp_path):
    trained = tmp_path / "outputs" / "sft-tiny-qwen2-sample" / "2026-01-01_00-00-00"
    trained.mkdir(parents=True)
    assert (
        compose("objective=none", f"init_from={trained}").run_name == "none-tiny-qwen2-sample-from-2026-01-01_00-00-00"
    )
    (trained / "config.yaml").write_text("run_name: sft-tiny-qwen2-sample\n")  # what every run writes
    assert (
        compose("objective=none", f"init_from={trained}").run_name
        == "none-tiny-qwen2-sample-from-sft-tiny-qwen2-sample"
    )


@pytest.mark.parametrize(
    ("overrides", "name", "why"),
    [
        (("debug=short",), "sft-tiny-qwen2-sample-short", "debug=short"),
        (
            ("debug=fast_dev_run", "probe=topk_freq"),
            "sft-tiny-qwen2-sample-probe-topk_freq-fast_dev_run",
            "debug=fast_dev_run",
        ),
        (("trainer.fast_dev_run=2",), "sft-tiny-qwen2-sample-fast_dev_run", "trainer.fast_dev_run=2"),
        (("trainer.max_steps=3",), "sft-tiny-qwen2-sample", None),  # cut by hand: a full run's name
    ],
)
def test_a_short_run_is_marked_in_its_name_and_says_why(compose, overrides, name, why):
    cfg = compose(*overrides)
    assert (cfg.run_name, cfg.short_run) == (name, why)
