"""CharacterEval: the reader on schema-faithful fixtures, CharacterRM's input and scoring with a tiny stand-in
reward model loaded from a folder, the aggregation by hand and against the paper's Table 4, a whole run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rpbench.core.errors import DataFormatError
from rpbench.data.charactereval import DIMENSIONS, METRICS, read_test
from rpbench.data.charactereval_prompts import OPENING, reward_model_input
from rpbench.data.readers import STRICT, NoRubrics
from rpbench.eval.benchmarks.charactereval import aggregate
from rpbench.scoring.character_rm import CharacterRM, CharacterRMSettings

FIXTURE = Path(__file__).parent / "fixtures" / "charactereval"
BOOT = {"n_resamples": 50, "confidence": 0.95, "seed": 0, "method": "percentile"}
STAND_IN = '''import torch
from transformers import Qwen2ForSequenceClassification


class StandInCharRM(Qwen2ForSequenceClassification):
    """Returns (logits, sigmoid of the logit), as the released model's output[1] is read."""

    def forward(self, input_ids=None, **kwargs):
        logits = super().forward(input_ids=input_ids, **kwargs).logits
        return logits, torch.sigmoid(logits[:, 0])
'''


def read(root: Path = FIXTURE):
    return read_test(root, NoRubrics(task_dimensions=None), STRICT)


def copy_fixture(tmp_path: Path) -> Path:
    root = tmp_path / "CharacterEval"
    shutil.copytree(FIXTURE, root)
    return root


def edit(root: Path, name: str, change) -> None:
    path = root / "data" / name
    document = json.loads(path.read_text(encoding="utf-8"))
    change(document)
    path.write_text(json.dumps(document, ensure_ascii=False), encoding="utf-8")


def test_records_turns_and_counts():
    result = read()
    assert [e.id for e in result.examples] == ["11", "12", "13"]
    assert result.counts == {"without_metrics": 1, "metric_assignments": 13, "metrics_without_record": 1}
    first, second, third = result.examples
    assert first.meta["profile"] == str(
        {
            "姓名": "林小满",
            "性别": "女",
            "工作": "茶馆掌柜",
            "人物性格": "爽快，嘴硬心软",
            "口头禅": ["哎呀", "算了算了"],
        }
    )
    assert first.prompt[0].role == "system" and first.prompt[0].content.startswith(first.meta["profile"] + "\n")
    assert [(t.role, t.content) for t in first.prompt[1:]] == [
        ("user", "周大山：掌柜的，今天有新茶吗？"),
        ("assistant", "林小满：有，刚到的龙井。"),
        ("user", "周大山：来一壶，记我账上。"),
    ]
    # the character opens (a user cue first); two other speakers in a row are one user turn
    assert [(t.role, t.content) for t in second.prompt[1:]] == [
        ("user", OPENING),
        ("assistant", "周大山：（推门）下雨了。"),
        ("user", "林小满：快进来，别淋着。\n阿福：大山哥，镖局来人找你。\n林小满：（递毛巾）先擦擦。"),
    ]
    assert second.meta["metrics"] == ["Accuracy", "Hallucination", "Behavior", "Utterance", "Fluency"]
    assert third.task == "林小满" and third.reference == ""


@pytest.mark.parametrize(
    ("name", "change", "where"),
    [
        ("test_data.jsonl", lambda d: d[1].update(role="无名"), "record 1 (id '12'): field 'role'"),
        (
            "test_data.jsonl",
            lambda d: d[0].update(context="周大山 掌柜的"),
            "record 0 (id '11'): field 'context': line 1",
        ),
        (
            "test_data.jsonl",
            lambda d: d[2].update(context="林小满：我先说。"),
            "field 'context': a dialogue whose last",
        ),
        ("test_data.jsonl", lambda d: d[0].pop("novel_name"), "field 'novel_name': required"),
        ("id2metric.jsonl", lambda d: d["11"].append(["Charm", "魅力"]), "record 11: field '11[4]'"),
        ("id2metric.jsonl", lambda d: d["13"].__setitem__(0, ["Humanlikeness", "像人"]), "Humanlikeness's Chinese"),
        ("character_profiles.json", lambda d: d.__setitem__("周大山", "镖师"), "field '周大山'"),
    ],
)
def test_a_bad_record_is_named_by_file_record_and_field(tmp_path, name, change, where):
    root = copy_fixture(tmp_path)
    edit(root, name, change)
    with pytest.raises(DataFormatError, match=None) as raised:
        read(root)
    assert str(raised.value).startswith(str(root / "data" / name)) and where in str(raised.value)


def test_the_reward_model_input_has_the_tagged_sections():
    text = reward_model_input("{'姓名': '甲'}", "乙：你好\n甲：嗯", "甲：再见", "共情度")
    assert text == (
        "<RoleInfo>\n\n{'姓名': '甲'}\n\n<Context>\n\n乙：你好\n甲：嗯"
        "\n\n<Response>\n\n甲：再见\n\n<Dimension>\n\n共情度"
    )


@pytest.fixture
def stand_in_rm(tmp_path, save_tiny_reward_model, tiny_model):
    """A folder with a tiny random reward model and its own code (modeling_stand_in.StandInCharRM)."""
    from rpbench.models import load_tokenizer

    folder = tmp_path / "char_rm"
    folder.mkdir()
    (folder / "modeling_stand_in.py").write_text(STAND_IN)
    return save_tiny_reward_model(folder, eos_token_id=load_tokenizer(tiny_model()).eos_token_id)


def rm_settings(folder: Path, **changes) -> CharacterRMSettings:
    values = {
        "path": str(folder),
        "folder_code": True,
        "model_class": "modeling_stand_in.StandInCharRM",
        "tokenizer_class": None,
        "dtype": "float32",
        "device": "cpu",
        "max_length": 4096,
        "output_index": 1,
        "scale": 4.0,
        "shift": 1.0,
    }
    return CharacterRMSettings.parse({**values, **changes}, "evaluator.reward_model")


def direct_score(folder: Path, text: str, keep: int) -> float:
    """sigmoid(logit) * 4 + 1 of the classifier on the text's ids plus EOS, cut to the last ``keep``."""
    import torch
    from transformers import AutoTokenizer, Qwen2ForSequenceClassification

    tokenizer = AutoTokenizer.from_pretrained(folder)
    ids = (tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id])[-keep:]
    model = Qwen2ForSequenceClassification.from_pretrained(folder).eval()
    with torch.no_grad():
        logit = model(input_ids=torch.tensor([ids])).logits[0, 0].item()
    return 1 / (1 + torch.exp(torch.tensor(-logit)).item()) * 4 + 1


def test_the_folder_model_scores_as_the_authors_read_it(stand_in_rm):
    rm = CharacterRM(rm_settings(stand_in_rm))
    texts = [
        reward_model_input("{'姓名': '甲'}", "乙：你好", reply, "共情度")
        for reply in ("甲：嗯。", "甲：今天天气很好，我们去喝茶吧。")
    ]
    scored = rm.score_all(texts)
    for text, s in zip(texts, scored):
        assert s.error is None and not s.truncated
        assert s.score == pytest.approx(direct_score(stand_in_rm, text, 4096), abs=1e-5)
        assert 1 <= s.score <= 5
    assert scored[0].score != scored[1].score
    short = CharacterRM(rm_settings(stand_in_rm, max_length=8)).score(texts[1])
    assert short.truncated and short.tokens == 8
    assert short.score == pytest.approx(direct_score(stand_in_rm, texts[1], 8), abs=1e-5)


def test_a_non_finite_output_is_a_failure_not_a_score(stand_in_rm):
    rm = CharacterRM(rm_settings(stand_in_rm))
    assert rm.score("甲").score is not None
    rm.model.score.weight.data.fill_(float("nan"))
    failed = rm.score("甲")
    assert failed.score is None and "non-finite" in failed.error


def test_settings_refuse_a_missing_folder_and_unasked_folder_code(tmp_path):
    with pytest.raises(Exception, match="evaluator.reward_model.path") as raised:
        rm_settings(tmp_path / "absent", folder_code=False)
    assert "folder_code" in str(raised.value)


def rows(scores: dict[str, list[float | None]]):
    return [
        {"id": str(i), "metric": key, "score": s, "error": None if s is not None else "boom", "truncated": False}
        for key, values in scores.items()
        for i, s in enumerate(values)
    ]


def test_aggregation_by_hand():
    keys = [m.key for m in METRICS]
    scores = {k: [3.0] for k in keys}
    scores.update(Fluency=[1.0, 2.0, None], Coherence=[4.0, 5.0], Empathy=[2.0, 2.5, 3.0, None])
    table = aggregate(rows(scores), BOOT)
    fluency = table["metrics"]["Fluency"]
    assert (fluency["n"], fluency["mean"], fluency["scoring_failures"]) == (2, 1.5, 1)
    assert table["metrics"]["Coherency"]["mean"] == 4.5 and table["metrics"]["Empathy"]["mean"] == 2.5
    conversational = (1.5 + 4.5 + 3.0) / 3
    attractiveness = (3.0 + 3.0 + 3.0 + 2.5) / 4
    assert table["dimensions"]["Conversational Ability"]["mean"] == pytest.approx(conversational)
    assert table["dimensions"]["Character Consistency"]["mean"] == pytest.approx(3.0)
    assert table["dimensions"]["Role-playing Attractiveness"]["mean"] == pytest.approx(attractiveness)
    assert table["overall"]["mean"] == pytest.approx((conversational + 3.0 + attractiveness) / 3)
    low, high = fluency["ci_low"], fluency["ci_high"]
    assert 1.0 <= low <= 1.5 <= high <= 2.0
    assert "Personality Back-Testing" in table["not_computed"]


def test_a_metric_without_any_score_leaves_its_dimension_and_overall_without_value():
    scores = {m.key: [3.0] for m in METRICS} | {"Empathy": [None, None]}
    table = aggregate(rows(scores), BOOT)
    assert table["metrics"]["Empathy"]["mean"] is None and table["metrics"]["Empathy"]["scoring_failures"] == 2
    assert table["dimensions"]["Role-playing Attractiveness"]["mean"] is None and table["overall"]["mean"] is None
    assert table["dimensions"]["Character Consistency"]["mean"] == 3.0


# Table 4 of the paper (arXiv 2401.01275v2; the repository's assets/leaderboard.png): per-metric scores, then
# each dimension's Avg., in the order of METRICS per dimension.
TABLE_4 = {
    "ChatGLM3-6B": (
        [3.269, 3.647, 3.283],
        3.399,
        [2.016, 2.792, 2.704, 2.455, 2.812],
        2.556,
        [3.064, 2.932, 1.969, 2.993],
        2.739,
    ),
    "Baichuan2-13B": (
        [3.596, 3.924, 3.864],
        3.795,
        [1.802, 2.869, 2.946, 2.808, 3.081],
        2.701,
        [3.700, 2.703, 2.136, 3.021],
        2.890,
    ),
    "BC-NPC-Turbo": (
        [3.578, 3.898, 3.916],
        3.798,
        [1.802, 2.964, 2.993, 2.910, 3.151],
        2.764,
        [3.836, 2.643, 2.336, 2.971],
        2.946,
    ),
    "GPT-4": (
        [3.332, 3.669, 3.343],
        3.448,
        [2.250, 2.855, 2.785, 2.721, 2.873],
        2.697,
        [3.143, 3.184, 2.153, 3.010],
        2.873,
    ),
}


@pytest.mark.parametrize("model", TABLE_4)
def test_dimension_averages_match_the_papers_table_4(model):
    ca, ca_avg, cc, cc_avg, ra, ra_avg = TABLE_4[model]
    table = aggregate(rows({m.key: [v] for m, v in zip(METRICS, [*ca, *cc, *ra])}), BOOT)
    assert {m.name: table["metrics"][m.name]["mean"] for m in METRICS} == dict(
        zip([m.name for m in METRICS], [*ca, *cc, *ra])
    )
    for dimension, published in zip(DIMENSIONS, (ca_avg, cc_avg, ra_avg)):
        assert table["dimensions"][dimension]["mean"] == pytest.approx(
            published, abs=1e-3
        )  # both rounded to 3 decimals


@pytest.mark.slow
def test_a_run_generates_scores_and_resumes(tmp_path, stand_in_rm, run_in_process):
    overrides = (
        "objective=none",
        "logger=none",
        "data=charactereval",
        f"data.files.test={FIXTURE}",
        "evaluator.generation.max_new_tokens=8",
        "evaluator.bootstrap.n_resamples=20",
        f"evaluator.reward_model.path={stand_in_rm}",
        "evaluator.reward_model.model_class=modeling_stand_in.StandInCharRM",
        "evaluator.reward_model.tokenizer_class=null",
        "evaluator.reward_model.dtype=float32",
        "evaluator.reward_model.device=cpu",
    )
    run = tmp_path / "run"
    results = run_in_process(run, *overrides)["eval"]
    predictions = {r["id"]: r["prediction"] for r in map(json.loads, (run / "predictions.jsonl").open())}
    scored = [json.loads(line) for line in (run / "rm_scores.jsonl").open()]
    assert len(scored) == 13 and all(r["error"] is None for r in scored)
    examples = {e.id: e for e in read().examples}
    key_to_metric = {m.key: m for m in METRICS}
    for row in scored[:3]:  # each score is the stand-in's on the first line of the reply
        e, metric = examples[row["id"]], key_to_metric[row["metric"]]
        text = reward_model_input(
            e.meta["profile"], e.meta["context"], predictions[e.id].split("\n")[0], metric.chinese
        )
        assert row["score"] == pytest.approx(direct_score(stand_in_rm, text, 4096), abs=1e-4)
    table = results["charactereval"]
    fluency = [r["score"] for r in scored if r["metric"] == "Fluency"]
    assert table["metrics"]["Fluency"]["n"] == 2 and table["metrics"]["Fluency"]["mean"] == pytest.approx(
        sum(fluency) / 2
    )
    means = [table["dimensions"][d]["mean"] for d in DIMENSIONS]
    assert table["overall"]["mean"] == pytest.approx(sum(means) / 3) and table["scoring_failures"] == 0
    assert "## CharacterEval" in (run / "report.md").read_text()
    # resumed: the weights gone, nothing is scored again and the same table comes back
    (stand_in_rm / "model.safetensors").unlink()
    again = run_in_process(run, *overrides)["eval"]["charactereval"]
    assert again["overall"] == table["overall"] and len((run / "rm_scores.jsonl").read_text().splitlines()) == 13
