"""evaluator=rmtbench: the release's layout (a schema-faithful stand-in, tests/fixtures/rmtbench), the
turn-by-turn protocol (the model's own replies in its history, resumable), Chinese and English judge replies,
hand-computed aggregation, named errors, and a whole run against a model and a judge on 127.0.0.1."""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from stub_endpoints import stub_judge

from rpbench.core.errors import DataFormatError
from rpbench.data import readers
from rpbench.data.rmtbench import RMTBenchOptions
from rpbench.eval.benchmarks.rmtbench import aggregate, parse_score

FIXTURE = Path(__file__).parent / "fixtures" / "rmtbench"
BOTH = RMTBenchOptions(languages=("zh", "en"), version="claude", task_dimensions=None)
BOOTSTRAP = {"n_resamples": 10, "confidence": 0.95, "seed": 0, "method": "percentile"}


def read(root=FIXTURE, options=BOTH, policy=readers.STRICT):
    return readers.read("rmtbench", "test", root, options, policy)


def test_the_stand_in_is_read_dialogue_by_dialogue():
    result = read()
    assert result.counts == {
        "zh": 4,
        "en": 2,
        "character_understanding": 2,
        "character_maintenance": 1,
        "implicit_motivations": 1,
        "user_preference": 2,
        "security": 0,
        "user_turns": 2 + 1 + 3 + 2 + 1 + 3,
    }
    by_id = {e.id: e for e in result.examples}
    pref = by_id["zh/user_preference/苏小棠/0"]
    assert pref.task == "user_preference" and pref.meta["user_turns"] == [
        "我不吃花生，一点都不行。",
        "你推荐我尝尝什么点心？",
    ]
    assert pref.meta["reference"] == "不含花生的点心，例如桂花酥"
    assert [t.role for t in pref.prompt] == ["system"] and pref.prompt[0].content.startswith("你是苏小棠。")
    # the later release's question and answer are strings, not lists
    en = by_id["en/user_preference/Captain Reed/0"]
    assert en.meta["user_turns"][-1] == "Which trip would you take me on?"
    assert en.meta["reference"] == "A calm inshore route with birdwatching"


def copy_fixture(tmp_path):
    root = tmp_path / "RMTBENCH"
    shutil.copytree(FIXTURE, root)
    return root


def rewrite(path, change):
    rows = json.loads(path.read_text(encoding="utf-8"))
    change(rows)
    path.write_text(json.dumps(rows, ensure_ascii=False), encoding="utf-8")


def test_bad_records_are_named_by_file_record_and_field(tmp_path):
    root = copy_fixture(tmp_path)
    zh = root / "rmtbench_claude_zh.json"
    rewrite(zh, lambda rows: rows[0]["user_preference"][0].pop("answer"))
    with pytest.raises(
        DataFormatError,
        match=r"rmtbench_claude_zh\.json: record 0 \(id '苏小棠'\): field 'user_preference\[0\]\.answer'",
    ):
        read(root)
    skipped = read(root, policy=replace(readers.STRICT, on_error="skip"))
    assert skipped.summary()["skipped"] == 1 and skipped.counts["zh"] == 0 and skipped.counts["en"] == 2

    shutil.copy(FIXTURE / zh.name, zh)
    rewrite(zh, lambda rows: rows[0]["implicit_motivations"][0].__setitem__(1, 42))
    with pytest.raises(DataFormatError, match=r"field 'implicit_motivations\[0\]\[1\]': a non-empty string"):
        read(root)
    rewrite(zh, lambda rows: rows[0].pop("name"))
    with pytest.raises(DataFormatError, match=r"record 0: field 'name': required"):
        read(root)
    zh.write_text("[]", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"record file: field '<document>': a non-empty JSON list"):
        read(root)
    with pytest.raises(FileNotFoundError, match=r"rmtbench_claude45_zh\.json: no such file"):
        read(root, replace(BOTH, version="claude45"))


@pytest.mark.parametrize(
    "reply, score",
    [
        ("理由：情感自然。\n评分：4", 4),
        ("评分：５", 5),  # full-width digit
        ("Good throughout.\nScore: 3", 3),
        ("Score: 2 at first... final Score: 4", 4),  # the last labelled score
        ("The replies are vivid.\n5", 5),  # a number alone on the last line
        ("评分：6", None),  # above score_max
        ("评分：0", None),
        ("I give it 4 out of 5 overall", None),
        ("", None),
    ],
)
def test_the_score_is_the_last_labelled_or_bare_number(reply, score):
    assert parse_score(reply, 5) == score


def test_aggregation_by_hand():
    rows = [
        {
            "language": "zh",
            "scenario": "character_understanding",
            "dimension": "plot_advancement",
            "score": 4,
            "status": "ok",
        },
        {
            "language": "zh",
            "scenario": "implicit_motivations",
            "dimension": "plot_advancement",
            "score": 2,
            "status": "ok",
        },
        {
            "language": "zh",
            "scenario": "implicit_motivations",
            "dimension": "plot_advancement",
            "score": None,
            "status": "parse_failure",
        },
        {
            "language": "zh",
            "scenario": "user_preference",
            "dimension": "user_preference_awareness",
            "score": 5,
            "status": "ok",
        },
        {
            "language": "en",
            "scenario": "user_preference",
            "dimension": "user_preference_awareness",
            "score": None,
            "status": "request_failure",
        },
    ]
    table = aggregate(rows, BOOTSTRAP)
    zh = table["zh"]
    assert (
        zh["dimensions"]["plot_advancement"]["mean"] == 3.0
        and zh["dimensions"]["plot_advancement"]["parse_failures"] == 1
    )
    assert zh["scenarios"]["implicit_motivations"]["plot_advancement"]["mean"] == 2.0
    assert zh["overall"] == pytest.approx((3.0 + 5.0) / 2)
    # a dimension with no score leaves no overall: never a number built on failed requests
    assert (
        table["en"]["overall"] is None
        and table["en"]["dimensions"]["user_preference_awareness"]["request_failures"] == 1
    )


def test_the_users_prompt_files_replace_rpbenchs_with_their_sha256(tmp_path):
    from rpbench.data.rmtbench_prompts import RMTBenchPrompts
    from rpbench.data.templates import TemplateError

    text = "请评价{name}（{description}）的对话：\n{transcript}\n参考：{reference}\n满分{score_max}。"
    (tmp_path / "judge_security_zh.txt").write_text(f"\n{text}\n", encoding="utf-8")
    loaded = RMTBenchPrompts.load(tmp_path)
    assert loaded.record()["judge_security_zh"] == {
        "origin": "judge_security_zh.txt",
        "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
    }
    assert loaded.record()["judge_security_en"]["origin"] == "rpbench"
    (tmp_path / "judge_security_zh.txt").write_text("只有{name}", encoding="utf-8")
    with pytest.raises(TemplateError, match=r"judge_security_zh\.txt: slots \['name'\]"):
        RMTBenchPrompts.load(tmp_path)


DIMENSION_OF_LABEL = {
    "情感表达": "emotional_expression",
    "情感理解": "emotional_comprehension",
    "情节推进": "plot_advancement",
    "角色理解": "character_understanding",
    "角色保持": "character_maintenance",
    "用户偏好感知": "user_preference_awareness",
}
ZH_SCORE = {
    "emotional_expression": "评分：4",
    "emotional_comprehension": "理由：还行。\n评分：3",
    "plot_advancement": "评分：2",
    "character_understanding": "5",
    "character_maintenance": "评分：1",
    "user_preference_awareness": "评分：４",
}


def scripted(body: dict) -> str:
    """The model (``played``): its reply names the turn; the judge: a score per dimension, in Chinese or English."""
    messages = body["messages"]
    if body["model"] == "played":
        turn = sum(m["role"] == "user" for m in messages)
        return f"回复{turn}" if "你是" in messages[0]["content"] else f"Reply {turn}"
    text = messages[0]["content"]
    if "[标准]\n" in text:
        label = text.split("[标准]\n")[1].split("：")[0]
        dimension = DIMENSION_OF_LABEL[label]
        if dimension == "plot_advancement" and "加班" in text:
            return "不好说。"  # never a score: re-asked, then a parse failure
        return ZH_SCORE[dimension]
    if "User preference awareness" in text:
        return "The character remembered.\n3"
    return "Fine.\nScore: 5"


@pytest.mark.slow
def test_a_run_plays_each_dialogue_turn_by_turn_and_resumes(tmp_path, chat_stub, run_in_process):
    run = tmp_path / "run"
    overrides = (
        "objective=none",
        "logger=none",
        "data=rmtbench",
        f"data.files.test={FIXTURE}",
        "evaluator.backend=endpoint",
        "evaluator.endpoint.model=played",
        "evaluator.bootstrap.n_resamples=20",
        "judge=openai",
        "judge.api_key_env=null",
        "judge.cache_path=null",
        "judge.progress=false",
        "judge.parse_tries=2",
    )
    with chat_stub(scripted) as server:
        urls = (f"evaluator.endpoint.base_url={server.url}", f"judge.base_url={server.url}")
        results = run_in_process(run, *overrides, *urls)["eval"]
        played = [r for r in server.requests if r["model"] == "played"]
        # one request per user turn: 2 + 1 + 3 + 2 (zh) and 1 + 3 (en)
        assert len(played) == 12
        third = next(r for r in played if len(r["messages"]) == 6 and "加班" in r["messages"][1]["content"])
        assert [m["role"] for m in third["messages"]] == ["system", "user", "assistant", "user", "assistant", "user"]
        assert [m["content"] for m in third["messages"][2::2]] == ["回复1", "回复2"]  # its own replies
        before = len(server.requests)
        run_in_process(run, *overrides, *urls)  # the same folder: nothing left to generate
        assert not [r for r in server.requests[before:] if r["model"] == "played"]
    table = results["rmtbench"]
    zh = {d: s["mean"] for d, s in table["zh"]["dimensions"].items()}
    assert zh == {
        "emotional_expression": 4.0,
        "emotional_comprehension": 3.0,
        "plot_advancement": 2.0,
        "character_understanding": 5.0,
        "character_maintenance": 1.0,
        "user_preference_awareness": 4.0,
    }
    assert table["zh"]["dimensions"]["plot_advancement"]["parse_failures"] == 1
    assert table["zh"]["overall"] == pytest.approx(19 / 6)
    assert (results["empty_replies"], results["truncated"]) == (0, 0)
    assert table["en"]["overall"] == pytest.approx(23 / 5)
    assert table["zh"]["scenarios"]["implicit_motivations"]["plot_advancement"]["n"] == 0
    dialogues = (run / "dialogues.jsonl").read_text(encoding="utf-8")
    assert '"user": "今天加班到好晚，好累……", "character": "回复1"' in dialogues  # Chinese kept as it is
    judgements = [json.loads(line) for line in (run / "judgements.jsonl").open(encoding="utf-8")]
    failed = [j for j in judgements if j["status"] != "ok"]
    assert [(j["dimension"], j["attempts"]) for j in failed] == [("plot_advancement", 2)]
    report = (run / "report.md").read_text(encoding="utf-8")
    assert "## RMTBench" in report and "| zh | **overall** | | 3.167 |" in report


@pytest.mark.slow
def test_the_tiny_model_plays_in_process_cut_at_max_turns(tmp_path, chat_stub, run_in_process):
    """The local backend: a tiny model generates each turn in-process; evaluator.max_turns=2 cuts the one
    three-turn dialogue (counted), and each dialogue is judged on its scenario's dimensions."""
    run = tmp_path / "run"
    with chat_stub(scripted) as judge:
        results = run_in_process(
            run,
            "objective=none",
            "logger=none",
            "data=rmtbench",
            f"data.files.test={FIXTURE}",
            "data.languages=[zh]",
            "evaluator.max_turns=2",
            "evaluator.generation.max_new_tokens=4",
            "evaluator.bootstrap.n_resamples=10",
            *stub_judge(judge.url),
            "judge.parse_tries=1",
        )["eval"]
        assert len(judge.requests) == 4 + 4 + 3 + 1  # the dimensions of each zh dialogue's scenario
    ids = [[json.loads(line)["id"] for line in (run / f"predictions_turn_{t}.jsonl").open()] for t in (1, 2)]
    assert len(ids[0]) == 4 and sorted(ids[1]) == sorted(
        f"zh/{s}/苏小棠/0#turn2" for s in ("character_understanding", "implicit_motivations", "user_preference")
    )
    assert not (run / "predictions_turn_3.jsonl").exists() and results["truncated"] == 1
    assert set(results["rmtbench"]) == {"zh"} and results["n_dialogues"] == 4
