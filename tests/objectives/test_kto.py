"""KTO: prompt/completion/label records read by data=custom, the mismatched KL rows token by token, the
training step against a full-logits computation and TRL's loss formula, and a real run."""

from __future__ import annotations

import json
import math

import pytest
import torch

from rpbench.core.errors import DataFormatError
from rpbench.data import readers
from rpbench.data.chat import IGNORE_INDEX, ChatRenderer
from rpbench.models import load
from rpbench.objectives.kto import KTOModule

NAMES = ["Holmes", "Watson", "Hudson", "Lestrade", "Moriarty", "Adler"]
RECORDS = [
    {
        "prompt": f"Who is {name}?",
        "completion": f"{name}, of Baker Street." if i % 2 else "No idea.",
        "label": i % 2 == 1,
    }
    for i, name in enumerate(NAMES)
]


def labelled_file(tmp_path, records=RECORDS):
    path = tmp_path / "labelled.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_labelled_records_are_their_own_shape(tmp_path, data_options):
    result = readers.read("custom", "labelled", labelled_file(tmp_path), data_options("custom"))
    assert result.summary()["shape"] == "prompt/completion/label (strings)"
    first, second = result.examples[:2]
    assert (first.completion, first.desirable, second.desirable) == ("No idea.", False, True)
    assert first.prompt[-1].content == "Who is Holmes?"
    bad = labelled_file(tmp_path, [{**RECORDS[0], "label": 1}])
    with pytest.raises(DataFormatError, match=r"record 1: field 'label': true \(desirable\) or false"):
        readers.read("custom", "labelled", bad, data_options("custom"))
    with pytest.raises(DataFormatError, match="messages or prompt/completion records"):
        readers.read("custom", "train", labelled_file(tmp_path), data_options("custom"))  # not an SFT file


def test_mismatched_rows_pair_each_prompt_with_the_previous_completion(tmp_path, tiny_model, data_options):
    _, tokenizer = load(tiny_model())
    examples = readers.read("custom", "labelled", labelled_file(tmp_path), data_options("custom")).examples[:3]
    samples, _ = KTOModule.render(examples, ChatRenderer(tokenizer, "<|im_end|>", 512))
    batch = KTOModule.collate(samples, tokenizer.pad_token_id)
    assert batch["desirable"].tolist() == [False, True, False] and batch["input_ids"].shape[0] == 6
    for i, sample in enumerate(samples):
        other = samples[i - 1]
        start, other_start = sample["prompt_length"], other["prompt_length"]
        expected = sample["input_ids"][:start] + other["input_ids"][other_start:]
        row, labels = batch["input_ids"][3 + i], batch["labels"][3 + i]
        assert row[: len(expected)].tolist() == expected
        labelled = [t for t, label in zip(row.tolist(), labels.tolist(), strict=True) if label != IGNORE_INDEX]
        assert tokenizer.decode(labelled) == examples[i - 1].completion + "<|im_end|>"


def test_training_step_matches_trl_loss_on_full_logits(
    tmp_path, tiny_model, objective_config, data_options, naive_sequence_logps
):
    model, tokenizer = load(tiny_model("llama"))
    module = KTOModule(model, tokenizer, objective_config("kto", beta=0.5, undesirable_weight=1.33))
    with torch.no_grad(), torch.random.fork_rng(devices=[]):  # move the policy away from its reference
        torch.manual_seed(3)
        for param in model.parameters():
            param.add_(0.05 * torch.randn_like(param))
    examples = readers.read("custom", "labelled", labelled_file(tmp_path), data_options("custom")).examples[:4]
    samples, _ = KTOModule.render(examples, ChatRenderer(tokenizer, "<|eot_id|>", 512))
    batch = KTOModule.collate(samples, tokenizer.pad_token_id)
    batch["loss_scale"] = torch.tensor(0.25)
    with torch.no_grad():
        policy, _ = naive_sequence_logps(model, batch)
        reference, _ = naive_sequence_logps(module.reference.model, batch)
        # TRL's KTOTrainer: KL from the mismatched rows, clamped; chosen then rejected losses, weighted
        kl = (policy[4:] - reference[4:]).mean().clamp(min=0)
        ratios = policy[:4] - reference[:4]
        label = [e.desirable for e in examples]
        chosen = [1 - torch.sigmoid(0.5 * (ratios[i] - kl)) for i in range(4) if label[i]]
        rejected = [1.33 * (1 - torch.sigmoid(0.5 * (kl - ratios[i]))) for i in range(4) if not label[i]]
        expected = torch.stack(chosen + rejected).mean()
        got = module.training_step(batch, 0)
    assert got.item() == pytest.approx(expected.item(), rel=5e-5)


def test_a_batch_of_one_is_refused(objective_settings):
    with pytest.raises(ValueError, match=r"objective.batch_size=1: expected an integer >= 2 \(the KL estimate"):
        KTOModule.config_class.parse(objective_settings("kto", batch_size=1), "objective")


@pytest.mark.slow
def test_a_run_on_labelled_records(tmp_path, run_in_process):
    path = labelled_file(tmp_path, RECORDS * 2 + [{**r, "id": f"x{i}"} for i, r in enumerate(RECORDS)])
    results = run_in_process(
        tmp_path / "run",
        "data=custom",
        "objective=kto",
        f"data.files.labelled={path}",
        "data.val_fraction=0.3",
        "evaluator=none",
        "logger=none",
        "trainer.max_steps=1",
        "trainer.enable_progress_bar=false",
        "objective.batch_size=2",
    )
    assert results["records"]["labelled"]["duplicates_dropped"] == 6
    assert results["train"]["optimizer_steps"] == 1
    after = results["train"]["held_out"]["after"]
    assert after["completions"] >= 2 and math.isfinite(after["loss"]) and after["kl"] >= 0


def test_kto_without_a_labelled_file_is_a_named_error(tmp_path, run_in_process):
    with pytest.raises(ValueError, match=r"data=custom has no file for data.files.labelled: set data.files.labelled="):
        run_in_process(tmp_path / "run", "data=custom", "objective=kto", "evaluator=none", "logger=none")


def test_no_kto_micro_batch_pairs_a_completion_with_itself():
    from rpbench.data.datamodule import epoch_batcher
    from rpbench.objectives.kto import KTOModule

    # 5 completions at batch_size 2: the last one joins the batch before (no batch of one, none lost)
    plan = epoch_batcher(5, 2, seed=0, min_size=KTOModule.min_micro_batch)(0)
    assert sorted(len(b) for b in plan) == [2, 3] and sorted(i for b in plan for i in b) == list(range(5))
    with pytest.raises(ValueError, match="1 sample"):  # a single held-out completion: refused up front
        epoch_batcher(1, 2, seed=0, shuffle=False, min_size=KTOModule.min_micro_batch)
    one = {"input_ids": [1, 2, 3], "labels": [-100, 2, 3], "prompt_length": 1, "max_length": 8, "id": "a",
           "desirable": True, "images": []}  # fmt: skip
    with pytest.raises(ValueError, match="at least 2 completions"):
        KTOModule.collate([one], pad_token_id=0)
