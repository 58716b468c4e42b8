"""Reviews of the released MMRole-Eval reward model as reward-model data (distillation): one sample per review
record and metric, the held-out split by question, every sample labelled with the reviews' judge."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from rpbench.core.errors import ConfigError, DataFormatError
from rpbench.data import readers
from rpbench.data.mmrole.prompts import JUDGE_SYSTEM, METRICS, review_prompt
from rpbench.data.mmrole.reader import MMRoleOptions
from rpbench.data.mmrole.reviews import Heldout, ReviewsOptions, select_heldout
from rpbench.data.prepare import read_split
from rpbench.data.records import EvalExample, SFTExample
from rpbench.data.settings import data_spec

REPO_ROOT = Path(__file__).resolve().parents[2]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"

BUNDLED = REPO_ROOT / "rpbench" / "resources" / "mmrole_release" / "rm_reviews"
FULL = SHARED_DATA / "mmrole" / "in-test_reviews"
SMALL = {"questions": 2, "models": 2, "seed": 0, "share_questions": False}


def read(split, path=BUNDLED, heldout=SMALL, image_root=None, on_error="raise"):
    """The reviews under ``path`` as the MMRole-Eval_RM release, with this held-out selection."""
    options = ReviewsOptions(
        image_root=image_root, reference_judge="MMRole-Eval_RM", heldout=Heldout.parse(heldout, "data.heldout")
    )
    return readers.read("mmrole_reviews", split, path, options, replace(readers.STRICT, on_error=on_error))


def raw_records():
    """(model, scenario, record) of every bundled review record, read as plain JSON."""
    for path in sorted(BUNDLED.glob("*/*.json")):
        for record in json.loads(path.read_text()):
            yield path.parent.name, path.stem.removesuffix("_test"), record


def test_one_sample_per_record_and_metric_with_the_judge_prompt():
    train, test = read("train"), read("test")
    assert (len(train.examples), len(test.examples)) == (7 * 3 * 8, 2 * 2 * 8)  # 9 questions x 3 models
    assert all(isinstance(e, SFTExample) for e in train.examples)
    assert all(isinstance(e, EvalExample) for e in test.examples)
    by_id = {e.id: e for e in [*train.examples, *test.examples]}
    raw = list(raw_records())
    held = {(e.meta["scenario"], e.meta["question"]) for e in test.examples}
    unused = [(s, r["id"]) for m, s, r in raw if f"{m}/{s}/{r['id']}/{METRICS[0]}" not in by_id]
    assert len(unused) == 2 and set(unused) == held  # the held-out questions' third responses: in neither split
    assert len(by_id) == (len(raw) - len(unused)) * len(METRICS)
    for model, scenario, record in raw:
        for metric in METRICS:
            e = by_id.get(f"{model}/{scenario}/{record['id']}/{metric}")
            if e is None:
                continue
            turns = e.turns if isinstance(e, SFTExample) else (*e.prompt, None)
            system, user = turns[0], turns[1]
            assert (system.role, system.content) == ("system", JUDGE_SYSTEM)
            question, reply = record["conversations"]
            assert user.content == review_prompt(
                metric,
                question=question["value"],
                answer_a=reply["answer"],
                answer_b=reply["value"],
                role=record["role"],
                script=record["script"],
                other_role=record["other_role"],
            )
            assert user.image == record["image"]
            review = record["rm_review"][metric]
            if isinstance(e, SFTExample):
                assert e.turns[-1].role == "assistant" and e.turns[-1].content == review["review"]
            else:
                assert (e.reference, e.task) == (review["review"], scenario)
                assert e.meta == {
                    "metric": metric,
                    "score": review["score"],
                    "reference_judge": "MMRole-Eval_RM",
                    "model": model,
                    "question": record["id"],
                    "scenario": scenario,
                    "image": record["image"],
                }


def test_held_out_questions_are_never_trained_on():
    train, test = read("train"), read("test")
    held = {(e.meta["scenario"], e.meta["question"]) for e in test.examples}
    assert len(held) == 2
    assert all(
        len({e.meta["model"] for e in test.examples if (e.meta["scenario"], e.meta["question"]) == q}) == 2
        for q in held
    )
    assert not held & {(e.meta["scenario"], e.meta["question"]) for e in train.examples}
    assert test.summary()["heldout"] == {**SMALL, "responses": 4}
    assert test.summary()["models"] == ["gpt-4-turbo", "mmrole-agent", "qwen-vl-chat"]
    shared = read(
        "train", heldout={**SMALL, "share_questions": True}
    )  # the paper's counts: only the 4 held-out responses out
    assert len(shared.examples) == (9 * 3 - 4) * 8
    assert not {e.id for e in shared.examples} & {e.id for e in test.examples}


def test_heldout_selection_is_seeded_and_independent_of_file_order():
    answered = {("comment", f"q{i}"): ["m1", "m2", "m3"] for i in range(10)}
    answered[("comment", "q0")] = ["m1"]  # answered by one model: never held out with models=2
    chosen = select_heldout(answered, 4, 2, seed=5)
    assert len(chosen) == 8 and len({q for q, _ in chosen}) == 4 and ("comment", "q0") not in {q for q, _ in chosen}
    reordered = dict(reversed(list(answered.items())))
    assert select_heldout(reordered, 4, 2, seed=5) == chosen
    assert select_heldout(answered, 4, 2, seed=6) != chosen
    with pytest.raises(ValueError, match="heldout.questions=10: only 9 questions"):
        select_heldout(answered, 10, 2, seed=5)


def test_one_file_or_one_model_folder_names_the_model_from_its_folder():
    one_file = read("test", BUNDLED / "qwen-vl-chat" / "comment_test.json", heldout={**SMALL, "models": 1})
    assert {e.meta["model"] for e in one_file.examples} == {"qwen-vl-chat"}
    assert {e.task for e in one_file.examples} == {"comment"} and len(one_file.examples) == 2 * 8
    one_model = read("train", BUNDLED / "mmrole-agent", heldout={**SMALL, "models": 1})
    assert {e.meta["model"] for e in one_model.examples} == {"mmrole-agent"} and len(one_model.examples) == 7 * 8


def test_images_resolved_under_the_root(tmp_path):
    kept = read("test", image_root=str(tmp_path))
    assert all(e.prompt[1].image == str((tmp_path / e.meta["image"]).resolve()) for e in kept.examples)


def copy_with(tmp_path, change):
    """The bundled reviews in tmp_path, with ``change(record)`` applied to gpt-4-turbo's first comment record."""
    root = tmp_path / "reviews"
    shutil.copytree(BUNDLED, root)
    path = root / "gpt-4-turbo" / "comment_test.json"
    records = json.loads(path.read_text())
    change(records[0])
    path.write_text(json.dumps(records))
    return root, path


def test_an_unscored_review_names_file_record_and_field_or_is_skipped_and_counted(tmp_path):
    root, path = copy_with(tmp_path, lambda r: r["rm_review"]["Fluency"].update(score={}))
    with pytest.raises(DataFormatError) as error:
        read("train", root)
    assert (error.value.path, error.value.field) == (str(path), "rm_review.Fluency.score")
    assert "Iron_Man_comment_COCO_30_1" in str(error.value.record) and "1 to 10" in error.value.problem
    train, test = read("train", root, on_error="skip"), read("test", root, on_error="skip")
    assert len(train.skipped) + len(test.skipped) == 2  # each split counts the one unscored review
    assert (len(train.examples), len(test.examples)) == (7 * 3 * 8 - 1, 2 * 2 * 8)  # that sample alone is left out
    assert "gpt-4-turbo/comment/Iron_Man_comment_COCO_30_1/Fluency" not in {e.id for e in train.examples}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda r: r["rm_review"]["Coherency"].update(score=[0, 9]), "rm_review.Coherency.score"),
        (lambda r: r["rm_review"].pop("Tone Consistency"), "rm_review.Tone Consistency"),
        (lambda r: r["conversations"][1].pop("answer"), "conversations[1].answer"),
        (lambda r: r.update(image="../../etc/passwd"), "image"),
    ],
)
def test_bad_records_are_errors_naming_the_field(tmp_path, change, field):
    root, _ = copy_with(tmp_path, change)
    with pytest.raises(DataFormatError) as error:
        read("test", root)
    assert error.value.field == field


def test_data_config_reads_both_splits_with_the_configured_selection(compose):
    cfg = compose("data=sample_mmrole_reviews")
    assert cfg.data.files.test == cfg.data.files.train
    train, test = read_split(data_spec(cfg.data), "train"), read_split(data_spec(cfg.data), "test")
    assert (len(train.examples), len(test.examples)) == (7 * 3 * 8, 2 * 2 * 8)
    paper = compose("data=mmrole_reviews").data.heldout
    assert (paper.questions, paper.models) == (20, 2)
    # the release's reviews were written by the released reward model (eval/RM_review.sh), not by GPT-4
    assert {e.meta["reference_judge"] for e in test.examples} == {"MMRole-Eval_RM"}


def test_who_wrote_the_reviews_must_be_named():
    with pytest.raises(ConfigError, match="data.reference_judge='': expected who wrote the evaluations read"):
        ReviewsOptions.parse({"image_root": None, "reference_judge": "", "heldout": SMALL}, "data")


@pytest.mark.skipif(not FULL.is_dir(), reason=f"the MMRole release's reviews are not at {FULL}")
def test_full_release_gives_the_papers_320_held_out_samples():
    heldout = {"questions": 20, "models": 2, "seed": 0, "share_questions": False}
    train, test = read("train", FULL, heldout), read("test", FULL, heldout)
    assert len(test.examples) == 20 * 2 * 8 == 320
    assert len({(e.meta["scenario"], e.meta["question"]) for e in test.examples}) == 20
    assert len(train.examples) == (216 - 20) * 3 * 8


def test_one_model_answering_a_question_twice_is_an_error(tmp_path):
    root = tmp_path / "reviews"
    shutil.copytree(BUNDLED, root)
    shutil.copy(root / "gpt-4-turbo" / "comment_test.json", root / "gpt-4-turbo" / "comment_test_again.json")
    with pytest.raises(ValueError, match="model 'gpt-4-turbo' has two comment review records with id 'Iron_Man"):
        read("train", root)


def test_a_folder_given_to_a_one_file_format_is_named_as_such():
    with pytest.raises(FileNotFoundError, match="data file expected, got a folder"):
        readers.read(
            "mmrole",
            "test",
            BUNDLED / "gpt-4-turbo",
            MMRoleOptions(image_root=None, default_system=None, per_turn_samples=False),
        )
