"""evaluator=rm_bench: a reward model or a judge scored against human preference pairs (data=rm_bench).

The fixture's six pairs are built so each outcome and group is known by hand (the judge is scripted by reply
text; lengths are exact); the reward model is a tiny random sequence classifier written here, loaded by the real
loading code and checked against its own logits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rpbench.core.errors import ConfigError, DataFormatError

# id, category, seen, chosen length, rejected length, chosen score, rejected score (None: an unreadable reply)
PAIRS = [
    ("a", "consistency", True, 30, 10, 8, 3),
    ("b", "consistency", False, 10, 30, 2, 7),
    ("c", "engagement", "seen", 12, 12, 5, 5),
    ("d", "engagement", "unseen", 15, 40, 9, 4),
    ("e", "engagement", None, 40, 15, 6, 1),
    ("f", "consistency", False, 20, 14, 6, None),
]
# pairwise verdicts: (chosen shown first, rejected shown first); None: an unreadable reply
VERDICTS = {
    "a": ("[[A]]", "[[B]]"),  # both prefer the chosen reply: correct
    "b": ("[[A]]", "[[A]]"),  # always the first: a position flip, a tie
    "c": ("[[tie]]", "[[tie]]"),  # a tie both ways, no flip
    "d": ("[[B]]", "[[A]]"),  # both prefer the rejected reply: wrong
    "e": ("[[A]]", "[[B]]"),
    "f": ("[[A]]", None),  # failed
}
LENGTH_BINS = "evaluator.length_bins=[-10,10]"
UNREADABLE = "I would rather not say."


def reply(pair_id: str, side: str, length: int) -> str:
    text = f"{pair_id.upper()}-{side}"
    assert len(text) <= length
    return text.ljust(length, ".")


def pair_record(pair_id, category, seen, chosen_len, rejected_len, *_):
    record = {
        "id": pair_id,
        "character": "Ada",
        "profile": "A retired sea captain who speaks in short, salty sentences.",
        "context": [
            {"role": "user", "content": "Captain, the storm is coming."},
            {"role": "assistant", "content": "Then we reef the sails."},
            {"role": "user", "content": f"What now? ({pair_id})"},
        ],
        "chosen": reply(pair_id, "chosen", chosen_len),
        "rejected": reply(pair_id, "rejected", rejected_len),
        "category": category,
    }
    if seen is not None:
        record["seen"] = seen
    return record


@pytest.fixture
def pairs_file(tmp_path) -> Path:
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(pair_record(*p)) + "\n" for p in PAIRS))
    return path


def pointwise_replies() -> dict[str, str]:
    out = {}
    for pair_id, _, _, chosen_len, rejected_len, chosen, rejected in PAIRS:
        for side, length, score in (("chosen", chosen_len, chosen), ("rejected", rejected_len, rejected)):
            out[f"## Reply to rate\n{reply(pair_id, side, length)}"] = (
                UNREADABLE if score is None else f"Score: {score}"
            )
    return out


def pairwise_replies() -> dict[str, str]:
    out = {}
    for pair_id, _, _, chosen_len, rejected_len, *_ in PAIRS:
        first, second = VERDICTS[pair_id]
        out[f"## Reply A\n{reply(pair_id, 'chosen', chosen_len)}"] = first
        out[f"## Reply A\n{reply(pair_id, 'rejected', rejected_len)}"] = second or UNREADABLE
    return out


def judged_run(run_in_process, scripted_judge, out: Path, pairs: Path, scorer: str, replies: dict) -> dict:
    run_in_process(
        out,
        "objective=none",
        "logger=none",
        "data=rm_bench",
        f"data.files.test={pairs}",
        f"evaluator.scorer={scorer}",
        LENGTH_BINS,
        "evaluator.bootstrap.n_resamples=200",
        "judge=local",
        "judge.parse_tries=1",
        "judge.cache_path=null",
        "judge.progress=false",
        local_judge_server=scripted_judge(replies=replies),
    )
    return json.loads((out / "metrics.json").read_text())["eval"]


def counts(group: dict) -> tuple:
    return group["correct"], group["wrong"], group["ties"], group["failed"], group["accuracy"]


@pytest.mark.slow
def test_a_pointwise_judge_is_scored_as_counted_by_hand(tmp_path, pairs_file, run_in_process, scripted_judge):
    found = judged_run(run_in_process, scripted_judge, tmp_path / "run", pairs_file, "judge_pointwise",
                       pointwise_replies())["rm_bench"]  # fmt: skip
    overall = found["overall"]
    assert counts(overall) == (3, 1, 1, 1, 0.75)  # a d e correct, b wrong, c tie, f failed
    assert overall["tie_rate"] == pytest.approx(1 / 5)
    assert overall["accuracy_ties_as_half"] == pytest.approx(3.5 / 5)
    assert overall["ci_low"] in (0.0, 0.25, 0.5, 0.75) and overall["ci_high"] in (0.75, 1.0)  # means of 4 draws
    assert counts(found["by_category"]["consistency"]) == (1, 1, 0, 1, 0.5)
    assert counts(found["by_category"]["engagement"]) == (2, 0, 1, 0, 1.0)
    assert counts(found["by_seen"]["seen"]) == (1, 0, 1, 0, 1.0)  # a (true) and c ("seen")
    assert counts(found["by_seen"]["unseen"]) == (1, 1, 0, 1, 0.5)
    assert counts(found["by_seen"]["unlabelled"]) == (1, 0, 0, 0, 1.0)
    assert counts(found["by_length_direction"]["chosen_shorter"]) == (1, 1, 0, 0, 0.5)  # b d
    assert counts(found["by_length_direction"]["chosen_longer"]) == (2, 0, 0, 1, 1.0)  # a e f
    assert counts(found["by_length_direction"]["equal_length"]) == (0, 0, 1, 0, None)  # c
    assert list(found["by_length_bin"]) == ["< -10", "[-10, 10)", ">= 10"]
    assert counts(found["by_length_bin"]["< -10"]) == (1, 1, 0, 0, 0.5)  # b (-20) d (-25)
    assert counts(found["by_length_bin"]["[-10, 10)"]) == (0, 0, 1, 1, None)  # c (0) f (+6)
    assert counts(found["by_length_bin"][">= 10"]) == (2, 0, 0, 0, 1.0)  # a (+20) e (+25)
    assert found["length_balanced_accuracy"] == pytest.approx(0.75)
    assert found["judge"] == {"n": 12, "parse_failures": 1, "request_failures": 0}
    rows = {json.loads(line)["id"]: json.loads(line) for line in (tmp_path / "run" / "scores.jsonl").open()}
    assert rows["c"]["metrics"]["correct"] is None and rows["c"]["outcome"] == "tie"
    assert rows["b"]["metrics"]["correct"] == 0.0 and rows["b"]["length_diff"] == -20


@pytest.mark.slow
def test_a_pairwise_judge_is_asked_both_orders_and_its_flips_counted(
    tmp_path, pairs_file, run_in_process, scripted_judge
):
    out = tmp_path / "run"
    found = judged_run(run_in_process, scripted_judge, out, pairs_file, "judge_pairwise", pairwise_replies())
    found = found["rm_bench"]
    assert counts(found["overall"]) == (2, 1, 2, 1, pytest.approx(2 / 3))  # a e; d; b (flip) c (tie); f
    position = found["position"]
    assert (position["n_both_read"], position["flips"], position["flip_rate"]) == (5, 1, pytest.approx(0.2))
    assert counts(position["chosen_first"]) == (4, 1, 1, 0, 0.8)  # a b e f chosen, d rejected, c tie
    assert counts(position["chosen_second"]) == (2, 2, 1, 1, 0.5)  # a e chosen, b d rejected, c tie, f none
    asked = [json.loads(line) for line in (out / "judgements.jsonl").open()]
    assert sorted(row["asked"] for row in asked) == ["chosen_first"] * 6 + ["chosen_second"] * 6


@pytest.mark.slow
def test_a_local_reward_model_is_loaded_and_its_scores_decide(
    tmp_path, pairs_file, run_in_process, save_tiny_reward_model, tiny_model
):
    import torch
    from transformers import Qwen2ForSequenceClassification

    from rpbench.models import load_tokenizer

    folder = save_tiny_reward_model(tmp_path / "rm")
    tokenizer = load_tokenizer(tiny_model())
    out = tmp_path / "run"
    run_in_process(
        out, "objective=none", "logger=none", "data=rm_bench", f"data.files.test={pairs_file}",
        f"evaluator.reward_model.path={folder}", "evaluator.reward_model.batch_size=4", LENGTH_BINS,
        "evaluator.bootstrap.n_resamples=50",
    )  # fmt: skip
    results = json.loads((out / "metrics.json").read_text())
    assert results["model"] == "not loaded"  # the policy model is not what is evaluated
    model = Qwen2ForSequenceClassification.from_pretrained(folder).eval()
    rows = [json.loads(line) for line in (out / "scores.jsonl").open()]
    by_id = {p[0]: pair_record(*p) for p in PAIRS}
    profile = pair_record(*PAIRS[0])["profile"]
    system = f"You are Ada. {profile} Stay in character and reply as Ada would."
    for row in rows:
        record = by_id[row["id"]]
        for side in ("chosen", "rejected"):
            messages = [{"role": "system", "content": system}, *record["context"],
                        {"role": "assistant", "content": record[side]}]  # fmt: skip
            ids = tokenizer(tokenizer.apply_chat_template(messages, tokenize=False), add_special_tokens=False,
                            return_tensors="pt")  # fmt: skip
            with torch.no_grad():
                assert row[f"{side}_score"] == pytest.approx(model(**ids).logits[0, 0].item(), abs=1e-4)
        expected = "correct" if row["chosen_score"] > row["rejected_score"] else "wrong"
        assert row["outcome"] == expected
    overall = results["eval"]["rm_bench"]["overall"]
    assert overall["correct"] == sum(r["outcome"] == "correct" for r in rows)
    assert overall["accuracy"] == pytest.approx(overall["correct"] / 6)
    assert "judge" not in results["eval"]["rm_bench"]


def test_ties_are_counted_apart_from_the_accuracy():
    from rpbench.eval.benchmarks.rm_bench import pairwise_outcome, pointwise_outcome, preferred

    assert [pointwise_outcome(*s) for s in ((2.0, 1.0), (1.0, 2.0), (1.5, 1.5), (None, 1.0))] == [
        "correct", "wrong", "tie", "failed",
    ]  # fmt: skip
    assert preferred("A", True) == "chosen" and preferred("A", False) == "rejected" and preferred("tie", True) == "tie"
    assert pairwise_outcome("chosen", "rejected") == "tie" and pairwise_outcome("tie", "tie") == "tie"
    assert pairwise_outcome("rejected", "rejected") == "wrong" and pairwise_outcome(None, "chosen") == "failed"


def test_every_pair_tied_has_no_accuracy(group_values):
    from rpbench.eval.benchmarks.rm_bench import tally
    from rpbench.eval.settings import Bootstrap

    bootstrap = Bootstrap.parse(group_values("evaluator", "rm_bench", "evaluator.bootstrap"), "evaluator.bootstrap")
    found = tally(["tie", "tie", "failed"], bootstrap)
    assert (found["accuracy"], found["ties"], found["failed"], found["tie_rate"]) == (None, 2, 1, 1.0)


def test_the_judge_parsers_read_only_the_asked_form():
    from rpbench.scoring.judge.preference import parse_choice, parse_score

    assert [parse_score(t) for t in ("Score: 7", "**Score:** 10", "score=3.", "Score: 11", "7", "Score: 7/10")] == [
        7, 10, 3, None, None, None,
    ]  # fmt: skip
    assert [parse_choice(t) for t in ("[[A]]", "I pick [[b]].", "[[Tie]]", "[[A]] or [[B]]", "A")] == [
        "A", "B", "tie", None, None,
    ]  # fmt: skip


def read_pairs(path: Path, options):
    from rpbench.data.readers import read

    return read("rm_bench", "test", path, options).examples


def test_a_layout_with_other_keys_reads_through_the_field_mapping(tmp_path, data_options):
    path = tmp_path / "other.json"
    record = {"dialogue": "Who goes there?", "win": "A friend.", "lose": "Nobody.", "split": "unseen", "type": "lore"}
    path.write_text(json.dumps([record]))
    fields = {"id": None, "context": "dialogue", "chosen": "win", "rejected": "lose", "character": None,
              "profile": None, "category": "type", "seen": "split"}  # fmt: skip
    (example,) = read_pairs(path, data_options("rm_bench", rm_bench={"fields": fields}))
    assert [(t.role, t.content) for t in example.prompt] == [("user", "Who goes there?")]
    assert (example.reference, example.meta["rejected"], example.task, example.meta["seen"]) == (
        "A friend.", "Nobody.", "lore", False,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("change", "field", "problem"),
    [
        ({"chosen": None}, "chosen", "required"),
        ({"rejected": 3}, "rejected", "a string"),
        ({"rejected": "C-chosen...."}, "rejected", "both are the same text"),
        ({"seen": "maybe"}, "seen", "a boolean or one of"),
        ({"context": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Ho"}]}, "context", "user"),
        ({"context": [{"role": "system", "content": "Be Ada."}, {"role": "user", "content": "Hi"}]}, "context",
         "no system turn"),
        ({"context": 5}, "context", "a string or a non-empty list"),
    ],
)  # fmt: skip
def test_a_malformed_pair_is_named_by_file_record_and_field(tmp_path, data_options, change, field, problem):
    records = [pair_record(*p) for p in PAIRS[:3]]
    records[2] = {k: v for k, v in {**records[2], **change}.items() if v is not None}
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    with pytest.raises(DataFormatError) as caught:
        read_pairs(path, data_options("rm_bench"))
    error = caught.value
    assert (error.path, error.record, error.field) == (str(path), 3, field)  # the third line
    assert problem in error.problem


def test_the_scorer_and_the_judge_must_fit(compose):
    from rpbench.validate import validate

    with pytest.raises(ConfigError, match=r"evaluator.reward_model.path"):
        validate(compose("data=rm_bench", "objective=none"))
    with pytest.raises(ConfigError, match=r"scorer=judge_pairwise scores with the run's judge"):
        validate(compose("data=rm_bench", "objective=none", "evaluator.scorer=judge_pairwise"))
    with pytest.raises(ConfigError, match=r"length_bins"):
        validate(compose("data=rm_bench", "objective=none", "evaluator.scorer=judge_pointwise", "judge=local",
                         "evaluator.length_bins=[5,1]"))  # fmt: skip
    with pytest.raises(ConfigError, match=r"data=rm_bench"):
        validate(compose("data=sample", "evaluator=rm_bench", "objective=none", "evaluator.scorer=judge_pointwise",
                         "judge=local"))  # fmt: skip


def test_the_judge_s_budget_is_checked_before_anything_is_asked(tmp_path, pairs_file, run_in_process, scripted_judge):
    from rpbench.scoring.judge.budget import JudgeBudgetError

    with pytest.raises(JudgeBudgetError, match=r"estimated 12 requests"):
        run_in_process(
            tmp_path / "run", "objective=none", "logger=none", "data=rm_bench", f"data.files.test={pairs_file}",
            "evaluator.scorer=judge_pairwise", "judge=local", "judge.budget.tokens=10", "judge.cache_path=null",
            local_judge_server=scripted_judge(faults=["500"] * 20),
        )  # fmt: skip
    assert not (tmp_path / "run" / "judgements.jsonl").exists()
