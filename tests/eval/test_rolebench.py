"""RoleBench cross-evaluation (RoleMRC Table 4): the authors' question/reference files, ROUGE only."""

from __future__ import annotations

import json

import pytest
from omegaconf import open_dict
from rouge_score import rouge_scorer

from rpbench.data.prepare import read_split
from rpbench.eval.generate import dumps, prediction_record

SYSTEM = (
    "You are Sherlock Holmes, your description is: a consulting detective of Baker Street. Now please answer "
    "some questions to accurately show your personality traits! Your speaking style should fully imitate the "
    "personality role assigned to you! Please do not expose that you are an artificial intelligence model."
)
# The layout the RoleMRC authors' evaluation.py reads: capitalised roles, no task label.
RECORDS = [
    {
        "question": [{"role": "System", "content": SYSTEM}, {"role": "User", "content": "What is your method?"}],
        "reference": "My method is founded upon the observation of trifles.",
    },
    {
        "question": [
            {"role": "System", "content": SYSTEM},
            {"role": "User", "content": "Who are you?"},
            {"role": "Assistant", "content": "A detective."},
            {"role": "User", "content": "Describe London fog."},
        ],
        "reference": "A dense yellow fog settles over the city, my dear fellow.",
    },
    {
        "question": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Your favourite pastime?"}],
        "reference": "The violin, and a good pipe.",
        "task": "general",
    },
]


def write_records(path) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))


@pytest.mark.parametrize("data", ["rolebench_instruction", "rolebench_role"])
def test_rolebench_files_are_read_by_the_rolemrc_reader(compose, tmp_path, data):
    path = tmp_path / "instruction_generalization_test.jsonl"
    write_records(path)
    cfg = compose(f"data={data}", f"data.files.test={path}")
    examples = read_split(cfg.data, "test").examples
    assert [e.reference for e in examples] == [r["reference"] for r in RECORDS]
    assert [e.task for e in examples] == ["instruction_generalization_test"] * 2 + ["general"]
    assert [[t.role for t in e.prompt] for e in examples] == [
        ["system", "user"],
        ["system", "user", "assistant", "user"],
        ["system", "user"],
    ]
    assert examples[1].prompt[-1].content == "Describe London fog." and examples[0].meta["dimensions"] == []


@pytest.mark.slow
def test_rolebench_evaluation_reports_rouge_as_rouge_score_computes_it(compose, tmp_path):
    import rpbench.pipeline as pipeline

    path = tmp_path / "role_generalization_test.jsonl"
    write_records(path)
    cfg = compose(
        "objective=none",
        "logger=none",
        "data=rolebench_role",
        f"data.files.test={path}",
        "evaluator=rolebench",
        "evaluator.generation.max_new_tokens=12",
        "evaluator.bootstrap.n_resamples=10",
    )
    run = tmp_path / "run"
    with open_dict(cfg):
        del cfg["hydra"]
        cfg.paths.output_dir = str(run)
    # predictions written beforehand (generation resumes them all), so the scores are not all zero
    examples = read_split(cfg.data, "test").examples
    replies = ["My method is the observation of small things.", "Fog over London, my dear fellow.", "The violin."]
    run.mkdir()
    (run / "predictions.jsonl").write_text("".join(dumps(prediction_record(e, r)) for e, r in zip(examples, replies)))
    pipeline.run(cfg)
    predictions = {
        json.loads(line)["id"]: json.loads(line)["prediction"] for line in (run / "predictions.jsonl").open()
    }
    assert sorted(predictions.values()) == sorted(replies)
    overall = json.loads((run / "metrics.json").read_text())["eval"]["metrics"]["overall"]
    assert set(overall) == {"rouge1", "rouge2", "rougeL", "rougeLsum"}
    peer = rouge_scorer.RougeScorer(["rouge1", "rougeL"], use_stemmer=True)
    ids = sorted(predictions)
    assert len(ids) == 3
    references = {e.id: e.reference for e in examples}
    for rouge_type in ("rouge1", "rougeL"):
        expected = sum(peer.score(references[i], predictions[i])[rouge_type].fmeasure for i in ids) / 3
        assert overall[rouge_type]["mean"] == pytest.approx(expected) and expected > 0.2
