"""RoleBench cross-evaluation (RoleMRC Table 4): RoleBench's released layout (the bundled sample) and the RoleMRC
authors' converted question/reference files (data.format=rolemrc), ROUGE only."""

from __future__ import annotations

import json

import pytest
from omegaconf import open_dict
from rouge_score import rouge_scorer

from rpbench.data.prepare import read_split
from rpbench.data.settings import data_spec
from rpbench.validate import validate

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
    cfg = compose(f"data={data}", "data.format=rolemrc", "~data.rolebench", f"data.files.test={path}")
    examples = read_split(data_spec(cfg.data), "test").examples
    assert [e.reference for e in examples] == [r["reference"] for r in RECORDS]
    assert [e.task for e in examples] == ["instruction_generalization_test"] * 2 + ["general"]
    assert [[t.role for t in e.prompt] for e in examples] == [
        ["system", "user"],
        ["system", "user", "assistant", "user"],
        ["system", "user"],
    ]
    assert examples[1].prompt[-1].content == "Describe London fog." and examples[0].meta["dimensions"] == []


def replace_predictions(run, replies: dict[str, str]) -> None:
    """Each record of the run's predictions.jsonl given ``replies[id]`` as its prediction (its fingerprint kept)."""
    path = run / "predictions.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert {r["id"] for r in records} == set(replies)
    path.write_text("".join(json.dumps({**r, "prediction": replies[r["id"]]}) + "\n" for r in records))


@pytest.mark.slow
def test_rolebench_evaluation_reports_rouge_as_rouge_score_computes_it(compose, tmp_path):
    import rpbench.pipeline as pipeline

    path = tmp_path / "role_generalization_test.jsonl"
    write_records(path)
    cfg = compose(
        "objective=none",
        "logger=none",
        "data=rolebench_role",
        "data.format=rolemrc",
        "~data.rolebench",
        f"data.files.test={path}",
        "evaluator=rolebench",
        "evaluator.generation.max_new_tokens=12",
        "evaluator.bootstrap.n_resamples=10",
    )
    run = tmp_path / "run"
    with open_dict(cfg):
        del cfg["hydra"]
        cfg.paths.output_dir = str(run)
    # the model's predictions replaced under the fingerprint it wrote (the re-run resumes them all), so the
    # scores are not all zero
    examples = read_split(data_spec(cfg.data), "test").examples
    replies = ["My method is the observation of small things.", "Fog over London, my dear fellow.", "The violin."]
    pipeline.run(validate(cfg))
    replace_predictions(run, {e.id: r for e, r in zip(examples, replies)})
    pipeline.run(validate(cfg))
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


SAMPLE = "pkg://rpbench/resources/sample/rolebench"


@pytest.mark.parametrize(
    "data, counts",
    [
        ("rolebench_instruction", {"general": 3, "role_specific": 2}),
        ("rolebench_role", {"general": 2, "role_specific": 1}),
    ],
)
def test_the_released_layout_is_read_with_role_descriptions(compose, data, counts):
    cfg = compose(f"data={data}", f"data.files.test={SAMPLE}")
    result = read_split(data_spec(cfg.data), "test")
    assert {k.removeprefix("subset."): v for k, v in result.counts.items() if k.startswith("subset.")} == counts
    by_role = {e.meta["role"]: e for e in result.examples}
    first = result.examples[0]
    assert first.task == "general" and first.id.startswith("general/")
    assert first.reference == first.meta["references"][0] and len(first.meta["references"]) == 2
    holmes_or_wonka = by_role.get("Sherlock Holmes") or by_role["Willy Wonka"]
    system = holmes_or_wonka.prompt[0].content
    assert holmes_or_wonka.prompt[0].role == "system" and holmes_or_wonka.meta["role"] in system
    assert ("Baker Street" in system) or ("chocolate maker" in system)


def released_copy(tmp_path):
    import shutil

    from rpbench.data.files import package_path

    root = tmp_path / "RoleBench"
    shutil.copytree(package_path(SAMPLE), root)
    return root, root / "rolebench-eng" / "instruction-generalization" / "role_specific" / "test.jsonl"


def test_an_undescribed_role_or_a_bad_answer_list_is_named(compose, tmp_path):
    from rpbench.core.errors import DataFormatError

    root, path = released_copy(tmp_path)
    cfg = compose("data=rolebench_instruction", f"data.files.test={root}")
    path.write_text(json.dumps({"role": "Nobody", "question": "Who?", "generated": ["No one."]}) + "\n")
    with pytest.raises(DataFormatError, match=r"role_specific/test\.jsonl: record 1: field 'role'.*'Nobody'"):
        read_split(data_spec(cfg.data), "test")
    path.write_text(json.dumps({"role": "Captain Ahab", "question": "Why?", "generated": []}) + "\n")
    with pytest.raises(DataFormatError, match=r"record 1: field 'generated': a non-empty list"):
        read_split(data_spec(cfg.data), "test")


@pytest.mark.slow
def test_released_layout_evaluation_reports_rouge_per_subset(compose, tmp_path, run_in_process):

    run = tmp_path / "run"
    overrides = ["objective=none", "logger=none", "data=sample_rolebench", "evaluator=rolebench"]
    examples = read_split(data_spec(compose(*overrides).data), "test").examples
    # the model's predictions replaced under the fingerprint it wrote (the re-run resumes them all): half of
    # each reference's words
    replies = {e.id: " ".join(e.reference.split()[::2]) for e in examples}
    run_in_process(run, *overrides, "evaluator.bootstrap.n_resamples=10", "evaluator.generation.max_new_tokens=4")
    replace_predictions(run, replies)
    results = run_in_process(
        run, *overrides, "evaluator.bootstrap.n_resamples=10", "evaluator.generation.max_new_tokens=4"
    )["eval"]
    peer = rouge_scorer.RougeScorer(["rouge1", "rougeL"], use_stemmer=True)
    scores = {json.loads(line)["id"]: json.loads(line) for line in (run / "scores.jsonl").open()}
    assert len(scores) == 5
    for e in examples:
        expected = peer.score(e.reference, replies[e.id])
        assert scores[e.id]["metrics"]["rougeL"] == pytest.approx(expected["rougeL"].fmeasure)
        assert expected["rougeL"].fmeasure > 0.3
        assert scores[e.id]["task"] == e.task
    task = results["metrics"]["task"]
    assert {k: v["rouge1"]["n"] for k, v in task.items()} == {"general": 3, "role_specific": 2}
    general = [peer.score(e.reference, replies[e.id])["rouge1"].fmeasure for e in examples if e.task == "general"]
    assert task["general"]["rouge1"]["mean"] == pytest.approx(sum(general) / 3)
