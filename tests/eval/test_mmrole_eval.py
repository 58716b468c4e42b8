"""MMRole-Eval: the golden reproduction of every official results CSV, and judging via a real local server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rpbench.core.errors import DataFormatError
from rpbench.data.mmrole.prompts import METRICS, REASK
from rpbench.eval.benchmarks.mmrole.judging import aggregate_reviews, judge_answers, write_results_csvs
from rpbench.scoring.chat.client import ChatClient
from rpbench.serve.model import load_served_model
from rpbench.serve.running import serve_in_thread

REPO_ROOT = Path(__file__).resolve().parents[2]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"

RELEASE = REPO_ROOT / "rpbench" / "resources" / "mmrole_release"  # the bundled subset of the MMRole release
FULL_RELEASE = SHARED_DATA / "mmrole"
SAMPLE_IMAGES = REPO_ROOT / "rpbench" / "resources" / "sample" / "mmrole" / "images"
MODELS = ("gpt-4-turbo", "mmrole-agent", "qwen-vl-chat")


@pytest.fixture(scope="module")
def review_tokens(group_values):
    """The reply length of evaluator=mmrole's judge (a review's length)."""
    return group_values("evaluator", "mmrole", "evaluator")["judge_max_tokens"]


@pytest.mark.parametrize("model", MODELS)
def test_official_results_csvs_are_reproduced_byte_for_byte(model, tmp_path):
    results = aggregate_reviews(RELEASE / "in-test_reviews" / model)
    written = write_results_csvs(results, tmp_path)
    official = sorted((RELEASE / "in-test_results" / model).glob("*.csv"))
    assert (
        [p.name for p in written]
        == [p.name for p in official]
        == ["comment_test.csv", "human-role_test.csv", "inter-role_test.csv"]
    )
    for mine, theirs in zip(written, official):
        assert mine.read_bytes() == theirs.read_bytes(), mine.name
    assert all(
        s["count"] == 72 and s["unreviewed"] == 0 and sum(s["parse_failures"].values()) == 0
        for s in results["files"].values()
    )


@pytest.mark.skipif(not FULL_RELEASE.is_dir(), reason=f"needs the full MMRole release at {FULL_RELEASE}")
@pytest.mark.parametrize("model", MODELS)
def test_bundled_subset_holds_the_release_scores_and_results(model):
    for name in ("comment_test", "human-role_test", "inter-role_test"):
        full = json.loads((FULL_RELEASE / "in-test_reviews" / model / f"{name}.json").read_text())
        bundled = json.loads((RELEASE / "in-test_reviews" / model / f"{name}.json").read_text())
        assert [r["id"] for r in bundled] == [r["id"] for r in full]
        for mine, theirs in zip(bundled, full):
            assert {m: v["score"] for m, v in mine["rm_review"].items()} == {
                m: v["score"] for m, v in theirs["rm_review"].items()
            }
            assert all(
                v["review"] == theirs["rm_review"][m]["review"] for m, v in mine["rm_review"].items() if "review" in v
            )
        official = FULL_RELEASE / "in-test_results" / model / f"{name}.csv"
        assert (RELEASE / "in-test_results" / model / f"{name}.csv").read_bytes() == official.read_bytes()
    if model == "gpt-4-turbo":
        answers = json.loads((FULL_RELEASE / "in-test_answers" / model / "comment_test.json").read_text())
        assert official_answers(2) == answers[:2]


def review(scores: dict[str, list | dict]) -> dict:
    return {m: {"review": f"text [Scores]: {s}", "score": s} for m, s in scores.items()}


def write_reviews(folder: Path, name: str, records: list) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps(records))
    return folder


def all_metrics(score) -> dict:
    return {m: score for m in METRICS}


def test_aggregation_by_hand_with_parse_failures_and_unreviewed_records(tmp_path):
    records = [
        {"id": "s1", "rm_review": review({**all_metrics([8, 10]), "Fluency": [6, 8]})},
        {"id": "s2", "rm_review": review({**all_metrics([10, 10]), "Fluency": {}})},
        {"id": "s3", "rm_review": review(all_metrics([9, 6]))},
        {"id": "s4"},
    ]
    results = aggregate_reviews(write_reviews(tmp_path / "r", "comment_test.json", records))
    summary = results["files"]["comment_test"]
    assert summary["count"] == 3 and summary["unreviewed"] == 1
    assert summary["means"]["Fluency"] == pytest.approx((0.75 + 1.5) / 2)
    assert summary["n"]["Fluency"] == 2 and summary["parse_failures"]["Fluency"] == 1
    assert summary["means"]["Tone Consistency"] == pytest.approx((0.8 + 1.0 + 1.5) / 3)
    assert summary["overall"] == pytest.approx((1.125 + 7 * 1.1) / 8)
    csv_text = write_results_csvs(results, tmp_path / "out")[0].read_text()
    assert csv_text.splitlines()[1].startswith("3,")


def test_swapped_reviews_give_position_bias_and_their_own_failure_counts(tmp_path):
    record = {
        "id": "s1",
        "rm_review": review(all_metrics([8, 10])),
        "rm_review_swapped": review({**all_metrics([10, 5]), "Fluency": {}}),
    }
    summary = aggregate_reviews(write_reviews(tmp_path / "r", "comment_test.json", [record]))["files"]["comment_test"]
    assert summary["swapped"]["means"]["Coherency"] == pytest.approx(0.5)
    assert summary["swapped"]["parse_failures"]["Fluency"] == 1 and summary["swapped"]["means"]["Fluency"] is None
    assert summary["position_bias"]["Coherency"] == pytest.approx(0.3)
    assert summary["position_bias"]["Fluency"] is None
    assert summary["means"]["Fluency"] == pytest.approx(0.8)


def test_pooled_results_over_files(tmp_path):
    folder = write_reviews(tmp_path / "r", "a_test.json", [{"id": "a", "rm_review": review(all_metrics([5, 10]))}])
    write_reviews(
        folder,
        "b_test.json",
        [
            {"id": "b", "rm_review": review(all_metrics([10, 10]))},
            {"id": "c", "rm_review": review(all_metrics([10, 10]))},
        ],
    )
    pooled = aggregate_reviews(folder)["all"]
    assert pooled["count"] == 3 and pooled["means"]["Coherency"] == pytest.approx(2.5 / 3)


@pytest.mark.parametrize(
    ("record", "message"),
    [
        (
            {"id": "x1", "rm_review": review({**all_metrics([8, 10]), "Fluency": "8/10"})},
            r"record x1.*rm_review.Fluency.score",
        ),
        ({"id": "x2", "rm_review": review({**all_metrics([8, 10]), "Fluency": [8, 0]})}, r"record x2.*positive"),
        (
            {"id": "x3", "rm_review": {m: {"review": "r", "score": [8, 10]} for m in METRICS[:-1]}},
            r"record x3.*rm_review.Tone Consistency",
        ),
        ({"id": "x4", "rm_review": ["not", "a", "mapping"]}, r"record x4.*rm_review"),
    ],
)
def test_malformed_reviews_name_file_record_and_field(tmp_path, record, message):
    folder = write_reviews(tmp_path / "r", "comment_test.json", [record])
    with pytest.raises(DataFormatError, match=r"comment_test\.json: " + message):
        aggregate_reviews(folder)


def test_malformed_files_are_named(tmp_path):
    folder = tmp_path / "r"
    folder.mkdir()
    (folder / "broken_test.json").write_text("[{")
    with pytest.raises(DataFormatError, match=r"broken_test\.json.*valid JSON"):
        aggregate_reviews(folder)
    (folder / "broken_test.json").write_text('{"id": 1}')
    with pytest.raises(DataFormatError, match=r"broken_test\.json.*JSON list"):
        aggregate_reviews(folder)
    with pytest.raises(FileNotFoundError):
        aggregate_reviews(tmp_path / "empty")


# ---------------------------------------------------------------- judging through a real local server


@pytest.fixture(scope="module")
def tiny():
    return load_served_model("tiny-qwen2")


def answers_folder(tmp_path: Path, records: list) -> Path:
    folder = tmp_path / "answers"
    folder.mkdir()
    (folder / "comment_test.json").write_text(json.dumps(records, ensure_ascii=False))
    return folder


def official_answers(n: int) -> list:
    records = json.loads((RELEASE / "in-test_answers" / "gpt-4-turbo" / "comment_test.json").read_text())
    assert len(records) >= n, "the bundled release subset holds fewer answer records than the test needs"
    return records[:n]


@pytest.fixture(scope="module")
def judge(judge_config):
    def judge(server, tmp_path, **overrides) -> ChatClient:
        settings = {
            "model": server.model_name,
            "base_url": server.base_url,
            "api_key_env": None,
            "progress": False,
            "parse_tries": 2,
            "cache_path": str(tmp_path / "judge.sqlite"),
            **overrides,
        }
        return ChatClient(judge_config(**settings))

    return judge


def test_judge_answers_writes_official_reviews_and_counts_unreadable_scores(
    tiny, tmp_path, scripted, review_tokens, judge
):
    replies = {
        "Fluency: Are the responses": "A is a bit stiff. [Scores]: (8, 10)",
        "Tone Consistency: Do the responses": "Both sound right.",  # no scores
        REASK: "Still no numbers.",
        "### Instruction": "Close call. [Scores]: (9, 10)",
    }
    answers = answers_folder(tmp_path, official_answers(2))
    with serve_in_thread(tiny, make_server=scripted(replies=replies)) as server:
        results = judge_answers(answers, judge(server, tmp_path), tmp_path / "reviews", review_tokens)
        assert server.stats.requests == 2 * 8 + 2  # one call per metric per record, one re-ask per Tone review
    summary = results["files"]["comment_test"]
    assert summary["count"] == 2
    assert summary["means"]["Fluency"] == pytest.approx(0.8)
    assert summary["means"]["Coherency"] == pytest.approx(0.9)
    assert summary["means"]["Tone Consistency"] is None
    assert summary["parse_failures"]["Tone Consistency"] == 2 and summary["n"]["Tone Consistency"] == 0
    assert summary["overall"] == pytest.approx((0.8 + 6 * 0.9) / 7)

    written = json.loads((tmp_path / "reviews" / "comment_test.json").read_text())
    assert [r["id"] for r in written] == [r["id"] for r in official_answers(2)]
    assert list(written[0]["rm_review"]) == list(METRICS)
    assert written[0]["rm_review"]["Fluency"] == {"review": "A is a bit stiff. [Scores]: (8, 10)", "score": [8.0, 10.0]}
    assert written[0]["rm_review"]["Tone Consistency"]["score"] == {}
    assert aggregate_reviews(tmp_path / "reviews")["files"] == results["files"]
    csv_row = write_results_csvs(results, tmp_path / "results")[0].read_text().splitlines()[1].split(",")
    assert csv_row[0] == "2" and csv_row[-1] == "" and float(csv_row[2]) == pytest.approx(0.8)


def test_position_swap_measures_bias(tiny, tmp_path, scripted, review_tokens, judge):
    record = official_answers(1)[0]
    record["conversations"][1]["value"] = "TRUTH-TEXT"
    record["conversations"][1]["answer"] = "ANSWER-TEXT"
    first = "### Response of Model A\n\n"
    replies = {first + "ANSWER-TEXT": "[Scores]: (8, 10)", first + "TRUTH-TEXT": "[Scores]: (10, 6)"}
    with serve_in_thread(tiny, make_server=scripted(replies=replies)) as server:
        results = judge_answers(
            answers_folder(tmp_path, [record]), judge(server, tmp_path), tmp_path / "reviews", review_tokens, swap=True
        )
        assert server.stats.requests == 16
    summary = results["files"]["comment_test"]
    assert summary["means"]["Fluency"] == pytest.approx(0.8)
    assert summary["swapped"]["means"]["Fluency"] == pytest.approx(0.6)
    assert summary["position_bias"]["Fluency"] == pytest.approx(0.2)
    written = json.loads((tmp_path / "reviews" / "comment_test.json").read_text())[0]
    assert written["rm_review_swapped"]["Fluency"]["score"] == [10.0, 6.0]


def test_images_are_attached_for_a_multimodal_judge_when_present(tiny, tmp_path, scripted, review_tokens, judge):
    with_image, without = official_answers(2)
    with_image["image"] = "The_Avengers/30.jpg"  # one of the release's images in the sample; COCO images are not
    with serve_in_thread(tiny, make_server=scripted(replies={"### Instruction": "[Scores]: (9, 10)"})) as server:
        results = judge_answers(
            answers_folder(tmp_path, [with_image, without]),
            judge(server, tmp_path, multimodal=True),
            tmp_path / "reviews",
            review_tokens,
            image_root=SAMPLE_IMAGES,
        )
    assert results["images"] == {"attached": 1, "missing": 1}
    summary = results["files"]["comment_test"]
    # the text-only local server refuses image parts (HTTP 400): those reviews are request failures
    assert summary["request_failures"]["Fluency"] == 1 and summary["n"]["Fluency"] == 1
    assert summary["means"]["Fluency"] == pytest.approx(0.9)


def test_malformed_answers_are_named(tiny, tmp_path, judge_config, review_tokens):
    record = official_answers(1)[0]
    del record["conversations"][1]["answer"]
    client = ChatClient(
        judge_config(**{"model": "m", "base_url": "http://127.0.0.1:9/v1", "api_key_env": None, "progress": False})
    )
    with pytest.raises(
        DataFormatError, match=rf"comment_test\.json: record {record['id']}.*conversations\[1\]\.answer"
    ):
        judge_answers(answers_folder(tmp_path, [record]), client, tmp_path / "reviews", review_tokens)


def test_the_mmrole_benchmark_writes_its_own_report_section():
    from rpbench.eval.benchmarks import BENCHMARKS

    results = {
        "mmrole_eval": {
            "metrics": ["accuracy", "fluency"],
            "files": {
                "in_test.json": {
                    "count": 2,
                    "means": {"accuracy": 0.5, "fluency": None},
                    "overall": 0.75,
                    "parse_failures": {"accuracy": 1, "fluency": 0},
                    "request_failures": {"accuracy": 0, "fluency": 2},
                }
            },
        }
    }
    (section,) = BENCHMARKS.get("mmrole").report_sections(results)
    assert "| in_test.json | 2 | 0.5000 | – | 0.7500 |" in section.splitlines()
    assert section.endswith("Unscored judgements (parse or request failures, not counted as 0): 3")
    assert BENCHMARKS.get("mmrole").report_sections({"metrics": {}}) == []
    assert BENCHMARKS.get("rolemrc").report_sections(results) == []
