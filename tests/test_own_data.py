"""`python run.py data=custom data.files.<split>=<your file>`: short real SFT and DPO runs on one's own files."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from omegaconf import open_dict

import rpbench.pipeline as pipeline
from rpbench.validate import validate

NAMES = ["Holmes", "Watson", "Hudson", "Lestrade", "Moriarty", "Adler", "Mycroft", "Gregson", "Toby", "Wiggins"]


def chat(name: str) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": f"You are {name}."},
        {"role": "user", "content": "Who are you?"},
        {"role": "assistant", "content": f"I am {name}, of London."},
    ]


def test_sft_on_own_messages_file_evaluated_on_unlabelled_prompt_completion_parquet(tmp_path, run_in_process):
    train = tmp_path / "my.jsonl"
    train.write_text("".join(json.dumps({"messages": chat(n)}) + "\n" for n in NAMES))
    test = tmp_path / "my_test.parquet"
    rows = [{"prompt": f"Where does {n} live?", "completion": f"{n} lives in London."} for n in NAMES[:3]]
    pq.write_table(pa.Table.from_pylist(rows), test)
    out = tmp_path / "run"
    run_in_process(
        out,
        "data=custom",
        f"data.files.train={train}",
        f"data.files.test={test}",
        "objective.epochs=1",
        "logger=none",
        "trainer.enable_progress_bar=false",
        "evaluator.generation.max_new_tokens=4",
        "evaluator.metrics=[bleu,rougeL]",
    )
    metrics = json.loads((out / "metrics.json").read_text())
    records = metrics["records"]
    assert records["train"]["read"] == 10 and records["train"]["shape"] == "messages (messages: role/content)"
    assert records["test"]["read"] == 3 and records["test"]["shape"] == "prompt/completion (strings)"
    assert metrics["train"]["optimizer_steps"] >= 1 and metrics["eval"]["n_records"] == 3
    by_task = metrics["eval"]["metrics"]
    assert list(by_task["task"]) == ["my_test"] and by_task["dimension"] == {} and by_task["rubric"] == {}
    predictions = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert len(predictions) == 3
    report = (out / "report.md").read_text()
    assert "| task | n | bleu | rougeL |" in report and "dimension (paper's five)" not in report


@pytest.mark.slow
def test_dpo_on_own_conversational_pairs_parquet(compose, tmp_path):
    pairs = tmp_path / "pairs.parquet"
    rows = [
        {
            "prompt": chat(n)[:2],
            "chosen": [chat(n)[2]],
            "rejected": [{"role": "assistant", "content": f"I am not {n}."}],
        }
        for n in NAMES
    ]
    pq.write_table(pa.Table.from_pylist(rows), pairs)
    overrides = ["data=custom", "objective=dpo", f"data.files.pairs={pairs}", "objective.epochs=1", "evaluator=none"]
    cfg = compose(*overrides, "logger=none")
    with open_dict(cfg):
        del cfg["hydra"]
        cfg.paths.output_dir = str(tmp_path / "run")
    results = pipeline.run(validate(cfg))
    assert results["records"]["pairs"]["read"] == 10
    assert results["records"]["pairs"]["shape"] == "prompt/chosen/rejected (conversational: message lists)"
    assert results["train"]["optimizer_steps"] >= 1


@pytest.mark.slow
def test_per_split_counts_of_duplicates_skipped_and_truncated_records(tmp_path, run_in_process):
    """metrics.json counts, per split, the records skipped (and of those the duplicates) and the samples cut
    to data.max_length: a 200k-character reply; a pair whose chosen reply is cut while the rejected one is whole."""
    train = tmp_path / "my.jsonl"
    records = [{"messages": chat(n), "id": n} for n in NAMES]
    records[3]["messages"][2]["content"] = "It is elementary. " * 11_200  # about 200k characters
    records.append(dict(records[0]))  # a repeated record: skipped, counted as a duplicate
    records.append({"text": "no shape"})  # skipped, no duplicate
    train.write_text("".join(json.dumps(r) + "\n" for r in records))
    pairs = tmp_path / "pairs.jsonl"
    rows = [{"prompt": f"Who is {n}?", "chosen": f"{n}.", "rejected": f"Not {n}.", "id": n} for n in NAMES]
    rows[2]["chosen"] = "A long answer. " * 2000
    pairs.write_text("".join(json.dumps(r) + "\n" for r in rows))
    common = ("data=custom", "data.on_error=skip", "data.val_fraction=0", "evaluator=none", "logger=none")
    common += ("trainer.max_steps=1", "trainer.enable_progress_bar=false", "data.max_length=256")
    sft = run_in_process(tmp_path / "sft", *common, f"data.files.train={train}")
    assert {k: sft["records"]["train"][k] for k in ("read", "skipped", "duplicates")} == {
        "read": 10,
        "skipped": 2,
        "duplicates": 1,
    }
    samples = sft["train"]["samples"]
    assert samples["truncated"] == {"train": 1, "val": 0} and samples["cut_unevenly"] == {"train": 0, "val": 0}
    dpo = run_in_process(tmp_path / "dpo", *common, "objective=dpo", f"data.files.pairs={pairs}")
    assert dpo["records"]["pairs"]["duplicates"] == 0
    samples = dpo["train"]["samples"]
    assert samples["truncated"] == {"train": 1, "val": 0} and samples["cut_unevenly"] == {"train": 1, "val": 0}
    saved = json.loads((tmp_path / "dpo" / "metrics.json").read_text())["train"]["samples"]
    assert saved["cut_unevenly"] == {"train": 1, "val": 0}
    assert (
        "Cut to data.max_length: truncated 1 train, 0 held-out, cut_unevenly 1 train"
        in (tmp_path / "dpo" / "report.md").read_text()
    )
