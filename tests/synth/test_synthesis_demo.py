"""The offline synthesis demo: synth=rolemrc_sample answered by judge=replay from the bundled recording, every
stage on the bundled inputs (the real faiss index and packaged encoder), and rpbench's RoleMRC readers on what
it writes; a request the recording lacks is named."""

from __future__ import annotations

import json

import pytest

from rpbench.data import readers
from rpbench.data.rolemrc import TEST_LABELS
from rpbench.scoring.chat.replay import ReplyNotRecorded
from rpbench.synth.synthesize import synthesize_run
from rpbench.validate import validate

DEMO = ("task=synthesize", "synth=rolemrc_sample", "judge=replay", "judge.progress=false")


@pytest.mark.slow
def test_the_demo_synthesizes_offline_files_the_rolemrc_readers_take(tmp_path, composed, rolemrc_options):
    out = tmp_path / "out"
    summary = synthesize_run(validate(composed(tmp_path / "run", *DEMO, f"synth.out_dir={out}")))
    stages = summary["stages"]
    assert summary["generator"] == {"backend": "replay", "model": "replay"}
    assert stages["profiles"]["accepted"] == 8 and stages["dialogues"]["accepted"] == stages["dialogues"]["planned"]
    assert stages["dialogues"]["usage"]["this_run"]["requests"] == stages["dialogues"]["planned"]  # no re-ask
    assert (out / "pool.index" / "index.faiss").is_file()  # kept in out_dir, not beside the bundled pool
    records = {
        split: readers.read("rolemrc", split, out / name, rolemrc_options).examples
        for split, name in (("train", "rolemrc_train-sft.jsonl"), ("pairs", "rolemrc_train-rl.jsonl"),
                            ("test", "rolemrc_test.jsonl"))
    }  # fmt: skip
    assert {split: len(r) for split, r in records.items()} == {"train": 26, "pairs": 18, "test": 18}
    assert {e.task for e in records["test"]} == set(TEST_LABELS)
    assert summary["output"]["overlap"] == {"test_file": "rolemrc_test.jsonl", "train": 0, "pairs": 0}


def test_a_request_the_recording_lacks_stops_the_demo_naming_it(tmp_path, composed):
    cfg = composed(tmp_path / "run", *DEMO, f"synth.out_dir={tmp_path / 'out'}", "synth.max_tokens.profile=999")
    with pytest.raises(ReplyNotRecorded) as missing:
        synthesize_run(validate(cfg))
    message = str(missing.value)
    assert message.startswith("judge.replay_from=pkg://rpbench/resources/synth_sample/replies.jsonl: no reply")
    assert "'max_tokens': 999" in message and "Turn this one-sentence persona" in message
    assert json.loads((tmp_path / "out" / "synthesis.json").read_text())["stages"]["personas"]["sampled"] == 8
