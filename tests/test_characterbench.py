"""evaluator=characterbench: the test layout (a schema-faithful stand-in, tests/fixtures/characterbench), the
judge's Chinese and English replies read, the authors' normalisation and averages computed by hand, the
authors' templates read from a stand-in clone, named errors, and a whole run against a judge on 127.0.0.1."""

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
from rpbench.data.characterbench import CharacterBenchOptions
from rpbench.eval.benchmarks.characterbench import aggregate, parse_score, scored_reply

FIXTURE = Path(__file__).parent / "fixtures" / "characterbench"
BOTH = CharacterBenchOptions(languages=("zh", "en"), task_dimensions=None)
NO_BOOTSTRAP = {"n_resamples": 10, "confidence": 0.95, "seed": 0, "method": "percentile"}


def read(root=FIXTURE, options=BOTH, policy=readers.STRICT):
    return readers.read("characterbench", "test", root, options, policy)


def test_the_stand_in_is_read_in_both_languages():
    result = read()
    assert result.counts == {"missing_subsets": 10, "zh": 5, "en": 5}
    by_id = {e.id: e for e in result.examples}
    fact = by_id["zh/fact_accuracy/11"]
    assert fact.task == "fact_accuracy" and [t.role for t in fact.prompt] == ["user"]
    assert "杭州的茶农" in fact.prompt[0].content and "user: 小满，你最喜欢哪种茶？" in fact.prompt[0].content
    assert (fact.meta["reference"], fact.meta["user_query"], fact.meta["dialogue"]) == (
        "明前龙井",
        "用户：小满，你最喜欢哪种茶？",
        "",  # judged without context, as the authors' script does for fact accuracy
    )
    # the English record is the translation; the greeting opens the model's dialogue; engagement keeps context
    orion = by_id["en/engagement/21"]
    assert "user: \nassistant: 晚上好，一起看星星吗？\nuser: Hello, Mr Zhou!" in orion.prompt[0].content
    assert orion.meta["dialogue"] == "User：Hello, Mr Zhou!\nMr Zhou：Hello, the stars are bright tonight.\n"
    assert by_id["zh/memory_consistency/31"].meta["reference"] == "阿青：我每天天不亮就出船，五点就到河上了。\n"
    assert by_id["zh/engagement/21"].meta["annotation_score"] == 5.0  # a numeric string read as a number


def copy_fixture(tmp_path):
    root = tmp_path / "CharacterBench"
    shutil.copytree(FIXTURE, root)
    return root, root / "eval_data" / "raw_data"


def test_bad_records_are_named_by_file_record_and_field(tmp_path):
    root, raw = copy_fixture(tmp_path)
    path = raw / "fact_accuracy_test.json"
    rows = json.loads(path.read_text(encoding="utf-8"))
    del rows[1]["messages"]["output"]["answer"]
    path.write_text(json.dumps(rows, ensure_ascii=False), encoding="utf-8")
    with pytest.raises(
        DataFormatError, match=r"fact_accuracy_test\.json: record 1 \(id '12'\): field 'messages.output.answer'"
    ):
        read(root)
    skipped = read(root, policy=replace(readers.STRICT, on_error="skip"))
    # the English record reads its own translation_en.messages, which still has the answer
    assert skipped.summary()["skipped"] == 1 and skipped.counts == {"missing_subsets": 10, "zh": 4, "en": 5}
    path.unlink()

    rows = json.loads((raw / "engagement_test.json").read_text(encoding="utf-8"))
    rows[0]["dialogue"][1]["speaker"] = "旁白"
    (raw / "engagement_test.json").write_text(json.dumps(rows, ensure_ascii=False), encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"record 0 \(id '21'\): field 'dialogue\[1\].speaker'.*'旁白'"):
        read(root)
    rows[0]["dialogue"] = rows[0]["dialogue"][:2]
    rows[0]["dialogue"][1]["speaker"] = "周先生"
    (raw / "engagement_test.json").write_text(json.dumps(rows, ensure_ascii=False), encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"field 'dialogue': a dialogue ending with the user's query"):
        read(root)
    (raw / "engagement_test.json").write_text('{"not": "a list"}', encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"engagement_test\.json: record file: field '<document>'"):
        read(root)
    rows = json.loads((raw / "memory_consistency_test.json").read_text(encoding="utf-8"))
    rows[0]["annotation_score"] = "高"
    (raw / "engagement_test.json").unlink()
    (raw / "memory_consistency_test.json").write_text(json.dumps(rows, ensure_ascii=False), encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"field 'annotation_score': a number, got '高'"):
        read(root)


@pytest.mark.parametrize(
    "reply, score",
    [
        ("3", 3.0),
        ("4\n理由：回复符合角色设定。", 4.0),
        ("评分：2", 2.0),
        ("评分:5分", 5.0),
        ("３", 3.0),  # a full-width digit
        ("Score: 2.5", 2.5),
        ("6", None),  # above the scale's top (5)
        ("0", None),
        ("回复很好，给 4 分", None),  # not on the first line alone
        ("", None),
    ],
)
def test_the_score_is_the_number_on_the_first_line(reply, score):
    assert parse_score(reply, 5) == score


def test_a_json_reply_is_scored_by_its_response():
    assert scored_reply('{"response": "（笑）明前龙井！"}') == ("（笑）明前龙井！", True)
    assert scored_reply('```json\n{"response": "Hi"}\n```') == ("Hi", True)
    assert scored_reply("  just text ") == ("just text", False)
    assert scored_reply('["response"]') == ('["response"]', False)


def test_the_authors_normalisation_and_averages_by_hand():
    """Scores scaled to 5 by each subset's top (4 for fact accuracy, 5 for engagement, as the largest human
    annotation of their files would make them), then averaged per subset, per dimension and over subsets."""
    rows = [
        {"language": "zh", "subset": "fact_accuracy", "score": 4.0, "status": "ok"},
        {"language": "zh", "subset": "fact_accuracy", "score": 2.0, "status": "ok"},
        {"language": "zh", "subset": "fact_accuracy", "score": None, "status": "parse_failure"},
        {"language": "zh", "subset": "engagement", "score": 3.0, "status": "ok"},
        {"language": "zh", "subset": "engagement", "score": None, "status": "empty_reply"},
        {"language": "zh", "subset": "attribute_consistency_bot", "score": 4.0, "status": "ok"},
        {"language": "zh", "subset": "attribute_consistency_human", "score": 2.0, "status": "ok"},
    ]
    tops = {
        ("zh", "fact_accuracy"): 4.0,
        ("zh", "engagement"): 5.0,
        ("zh", "attribute_consistency_bot"): 4.0,
        ("zh", "attribute_consistency_human"): 4.0,
    }
    table = aggregate(rows, tops, NO_BOOTSTRAP)["zh"]
    fact = table["subsets"]["fact_accuracy"]
    assert (fact["mean"], fact["n"], fact["parse_failures"]) == (pytest.approx((5.0 + 2.5) / 2), 2, 1)
    assert table["subsets"]["engagement"]["empty_replies"] == 1 and table["subsets"]["engagement"]["mean"] == 3.0
    # attribute consistency pools its bot (4 -> 5.0) and human (2 -> 2.5) subsets' scaled scores
    assert table["dimensions"]["attribute_consistency"]["mean"] == pytest.approx(3.75)
    assert table["average"] == pytest.approx((3.75 + 3.0 + 5.0 + 2.5) / 4)
    assert table["sparse"] == pytest.approx(3.75)  # fact accuracy alone
    assert table["dense"] == pytest.approx((3.0 + 3.75) / 2)  # engagement, attribute consistency


def test_the_authors_templates_are_read_from_a_clone_with_their_sha256(tmp_path):
    """Stand-in files with the authors' file names, variable names and slot names (the Chinese ones renamed)."""
    from rpbench.data.characterbench_prompts import DEFAULTS, LANGUAGES, SUBSETS, CharacterBenchPrompts, released
    from rpbench.data.templates import TemplateError, slots_of

    zh_names = {
        "fact_accuracy": "answer",
        "memory_consistency": "reference_dialogue",
        "emotion_self_regulation": "emotion",
    }
    texts = {}
    for subset in SUBSETS:
        for lang in LANGUAGES:
            where = released(subset, lang)
            slots = [
                zh_names.get(subset, "reference") if s == "reference" and lang == "zh" else s
                for s in slots_of(DEFAULTS[f"judge_{subset}_{lang}"])
            ]
            text = f"判分 {subset}: " + " ".join("{" + s + "}" for s in slots)
            texts[(subset, lang)] = text
            path = tmp_path / where.file
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a", encoding="utf-8") as f:
                f.write(f"{where.symbol} = {text!r}\n")
    roleplay = "\n".join(
        f"Role_Play_PROMPT_{lang.upper()} = 'Play {{character_profile}} {{user_profile}} {{dialogue}}'"
        for lang in LANGUAGES
    )
    (tmp_path / "roleplay_prompt.py").write_text(roleplay + "\n", encoding="utf-8")
    # morality_stability and _robustness share one variable; the second assignment in the file is the one read
    loaded = CharacterBenchPrompts.load(tmp_path)
    assert not loaded.own
    record = loaded.record()["judge_fact_accuracy_zh"]
    renamed = texts[("fact_accuracy", "zh")].replace("{answer}", "{reference}")
    assert record == {
        "origin": "construct_prompts/eval_prompts_zh/fact_accuracy.py:Fact_Acc_Judge_Prompt",
        "sha256": hashlib.sha256(renamed.encode()).hexdigest(),
    }
    out = loaded.render(
        "judge_fact_accuracy_zh",
        character_profile="茶农",
        dialogue="",
        user_query="问",
        character_response="答",
        reference="龙井",
    )
    assert out == "判分 fact_accuracy: 茶农  问 答 龙井"
    path = tmp_path / released("engagement", "en").file
    path.write_text("Engagement_Judge_Prompt = 'Rate {character_response} only.'\n", encoding="utf-8")
    with pytest.raises(TemplateError, match=r"engagement.py.*slots"):
        CharacterBenchPrompts.load(tmp_path)


# the judge's reply to each record's query (found in its prompt): Chinese and English forms
JUDGE = {
    "几点出船": "３",
    "最喜欢哪种茶": "评分：4",
    "种茶多少年": "2\n理由：部分正确。",
    "猎户座": "5",
    "天气怎么样": "6",  # off the scale: a parse failure
    "set out by boat": "Score: 1",
    "which tea": "4",
    "How many years": "3",
    "Orion": "2",
    "weather": "I would rather not say.",  # no score: a parse failure
}


def judge_reply(body: dict) -> str:
    """The judge's replies (JUDGE), and the evaluated model's: JSON in Chinese, plain text in English."""
    text = body["messages"][-1]["content"]
    if text.startswith("请扮演"):
        return '```json\n{"response": "（笑）我记得呀。"}\n```'
    if text.startswith("Play the character"):
        return "I remember it well."
    query = text.split("[用户发言]\n" if "[用户发言]" in text else "[User's message]\n")[1].split("\n")[0]
    return next(reply for key, reply in JUDGE.items() if key in query)


@pytest.mark.slow
def test_a_run_scores_both_languages_against_a_judge_on_localhost(tmp_path, chat_stub, run_in_process):
    run = tmp_path / "run"
    with chat_stub(judge_reply) as judge:
        results = run_in_process(
            run,
            "objective=none",
            "logger=none",
            "data=characterbench",
            f"data.files.test={FIXTURE}",
            "evaluator.backend=endpoint",  # the model's replies from the stub too (a tiny model's are empty)
            f"evaluator.endpoint.base_url={judge.url}",
            "evaluator.endpoint.model=played",
            "evaluator.bootstrap.n_resamples=20",
            *stub_judge(judge.url),
        )["eval"]
        requests = judge.requests
    judged = [r for r in requests if r["model"] != "played"]
    assert (
        len(requests) == 20
        and len(judged) == 10
        and all([m["role"] for m in r["messages"]] == ["user"] for r in requests)
    )
    assert {r["max_tokens"] for r in judged} == {512}
    assert all("阿青：（笑）我记得呀。" in r["messages"][0]["content"] for r in judged if "几点出船" in str(r))
    table = results["characterbench"]
    zh, en = table["zh"], table["en"]
    # rpbench's prompts: every subset's top is 5, so the scaled score is the judge's
    assert {s: t["mean"] for s, t in zh["subsets"].items()} == {
        "memory_consistency": 3.0,
        "fact_accuracy": 3.0,
        "engagement": 5.0,
    }
    assert {s: t["mean"] for s, t in en["subsets"].items()} == {
        "memory_consistency": 1.0,
        "fact_accuracy": 3.5,
        "engagement": 2.0,
    }
    assert zh["subsets"]["engagement"]["parse_failures"] == 1 and en["subsets"]["engagement"]["parse_failures"] == 1
    assert zh["average"] == pytest.approx(11 / 3) and en["average"] == pytest.approx(6.5 / 3)
    assert (zh["sparse"], zh["dense"]) == (3.0, 5.0)
    assert results["replies"] == {"n": 10, "not_json": 5}
    judgements = (run / "judgements.jsonl").read_text(encoding="utf-8")
    assert "理由：部分正确。" in judgements  # Chinese written as it is (ensure_ascii=False), read back whole
    rows = [json.loads(line) for line in judgements.splitlines()]
    assert {r["id"]: r["score"] for r in rows}["zh/fact_accuracy/12"] == 2.0
    metrics = json.loads((run / "metrics.json").read_text(encoding="utf-8"))["eval"]
    assert metrics["prompts"]["judge_engagement_zh"]["origin"] == "rpbench"
    report = (run / "report.md").read_text(encoding="utf-8")
    assert "## CharacterBench" in report and "| zh | **average** | | 3.667 |" in report


@pytest.mark.slow
def test_empty_replies_are_not_judged_and_leave_no_headline(tmp_path, chat_stub, run_in_process):
    """The tiny model's replies are empty: none is judged, each counted, and the run fails without a number."""
    from rpbench.pipeline import RunFailed

    run = tmp_path / "run"
    with chat_stub(judge_reply) as judge:
        with pytest.raises(RunFailed, match=r"CharacterBench average \(zh\)\) has no value"):
            run_in_process(
                run,
                "objective=none",
                "logger=none",
                "data=characterbench",
                f"data.files.test={FIXTURE}",
                "data.languages=[zh]",
                "evaluator.generation.max_new_tokens=4",
                "evaluator.bootstrap.n_resamples=10",
                *stub_judge(judge.url),
            )
        assert judge.requests == []
    table = json.loads((run / "metrics.json").read_text(encoding="utf-8"))["eval"]["characterbench"]
    assert set(table) == {"zh"} and sum(s["empty_replies"] for s in table["zh"]["subsets"].values()) == 5
