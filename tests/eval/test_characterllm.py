"""evaluator=characterllm: Character-LLM's interview layout (the bundled schema-faithful sample), both settings
against a recording judge on 127.0.0.1 and against rpbench's local judge server, and named errors."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import replace

import pytest
from stub_endpoints import stub_judge

from rpbench.core.errors import DataFormatError
from rpbench.data import readers
from rpbench.data.characterllm_prompts import DEFAULTS
from rpbench.data.files import package_path
from rpbench.data.readers import NoRubrics
from rpbench.eval.benchmarks.characterllm import parse_score

NO_RUBRICS = NoRubrics(task_dimensions=None)
SKIP = replace(readers.STRICT, on_error="skip")

SAMPLE = package_path("pkg://rpbench/resources/sample/characterllm")
# The score the recording judge gives each aspect (found by the criterion's name in the prompt).
GIVEN = {"Personality": 6, "Values": 5, "Memory": 4, "Avoiding hallucination": 7, "Stability": 3}


def test_the_sample_is_read_in_both_settings():
    result = readers.read("characterllm", "test", SAMPLE, NO_RUBRICS)
    assert result.counts == {"characters": 2, "single": 6, "turns": 3}
    first = result.examples[0]
    assert first.id == "single/Curie/0" and first.task == "single"
    assert [t.role for t in first.prompt] == ["system", "user"] and first.prompt[1].content == "Where did you grow up?"
    assert "Marie Curie" in first.prompt[0].content and first.meta["profile"].startswith("Marie Curie (1867-1934)")
    turns = [e for e in result.examples if e.task == "turns"]
    assert [e.id for e in turns] == ["turns/Curie/0", "turns/Darwin/0", "turns/Darwin/1"]


def copy_sample(tmp_path):
    root = tmp_path / "trainable-agents"
    shutil.copytree(SAMPLE, root)
    return root, root / "data" / "seed_data"


def test_a_malformed_interview_file_is_named(tmp_path):
    root, seed = copy_sample(tmp_path)
    path = seed / "questions" / "generated_agent_interview_Darwin.json"
    rows = json.loads(path.read_text())
    rows[1] = {"topic_id": "topic-2", "topic": "interpersonal relationships", "query": "Who do you live with?"}
    path.write_text(json.dumps(rows))
    with pytest.raises(DataFormatError, match=r"generated_agent_interview_Darwin\.json: record 1: field 'question'"):
        readers.read("characterllm", "test", root, NO_RUBRICS)
    skipped = readers.read("characterllm", "test", root, NO_RUBRICS, SKIP)
    assert skipped.summary()["skipped"] == 1 and skipped.counts["single"] == 5

    path.write_text('{"question": "not a list"}')
    with pytest.raises(DataFormatError, match="a non-empty JSON list"):
        readers.read("characterllm", "test", root, NO_RUBRICS)


def test_a_missing_or_untitled_profile_is_named(tmp_path):
    root, seed = copy_sample(tmp_path)
    (seed / "profiles" / "wiki_Curie.txt").write_text("Marie Curie was a physicist.\n\nMore.")
    with pytest.raises(DataFormatError, match=r"wiki_Curie\.txt: record 1: field 'title'"):
        readers.read("characterllm", "test", root, NO_RUBRICS)
    (seed / "profiles" / "wiki_Curie.txt").unlink()
    with pytest.raises(DataFormatError, match=r"wiki_Curie\.txt.*missing"):
        readers.read("characterllm", "test", root, NO_RUBRICS)


@pytest.mark.parametrize(
    "reply, score",
    [("Reasoning ...\n5\n5", 5), ("step 1 fine, step 2 fine. Score: 6", 6), ("no number", None), ("overall 9", None)],
)
def test_the_score_is_the_last_digit_after_whitespace(reply, score):
    assert parse_score(reply) == score


def reply(body: dict) -> str:
    text = body["messages"][-1]["content"]
    if "Write only your next utterance" in text:  # the interviewer
        asked = text.count("Man (speaking):") - 1  # the questions so far, then the cue
        return f"Question number {asked}?\n\nA second paragraph the model never sees."
    criterion = re.search(r"\[Criterion\]\n(.+?) \(1-7\)", text).group(1)
    if criterion == "Stability" and "Where did you grow up?" in text:  # single/Curie/0: no score
        return "I cannot rate this."
    return f"The replies are as they are.\n{GIVEN[criterion]}\n{GIVEN[criterion]}"


@pytest.mark.slow
def test_both_settings_are_interviewed_and_scored(tmp_path, chat_stub, run_in_process):
    run = tmp_path / "run"
    humans = tmp_path / "human_ratings.jsonl"  # people's scores of two interviews' aspects
    rated = [("single/Curie/0", "personality", [6, 5, 6]), ("turns/Darwin/1", "memory", [3, 4, 4])]
    humans.write_text("".join(json.dumps({"id": i, "rubric": r, "ratings": x}) + "\n" for i, r, x in rated))
    with chat_stub(reply) as judge:
        results = run_in_process(
            run,
            "objective=none",
            "logger=none",
            "data=sample_characterllm",
            "evaluator=characterllm",
            "evaluator.max_turns=2",
            "evaluator.generation.max_new_tokens=6",
            "evaluator.bootstrap.n_resamples=20",
            f"evaluator.human_ratings={humans}",
            "evaluator.human_level=interval",
            *stub_judge(judge.url),
        )["eval"]
        requests = judge.requests
    table = results["characterllm"]
    aspects = {"personality": 6, "values": 5, "memory": 4, "hallucination": 7, "stability": 3}
    for setting, n in (("single", 6), ("turns", 3)):
        assert table[setting]["n_interviews"] == n
        assert {a: s["mean"] for a, s in table[setting]["aspects"].items()} == aspects
        assert table[setting]["average"] == pytest.approx(sum(aspects.values()) / 5)
    interviews = [json.loads(line) for line in (run / "interviews.jsonl").open()]
    turns = [i for i in interviews if i["setting"] == "turns"]
    # two interviewer questions (first paragraph only), each answered by the model
    assert [[t["speaker"] for t in i["turns"]] for i in turns] == [["Man", "Curie", "Man", "Curie"]] + [
        ["Man", "Darwin", "Man", "Darwin"]
    ] * 2
    assert [t["text"] for t in turns[0]["turns"][::2]] == ["Question number 0?", "Question number 1?"]
    # the model's second-turn prompt holds the first exchange
    second = {json.loads(line)["id"] for line in (run / "predictions_turns_2.jsonl").open()}
    assert second == {"turns/Curie/0#turn2", "turns/Darwin/0#turn2", "turns/Darwin/1#turn2"}
    interviewer = [r for r in requests if "Write only your next utterance" in r["messages"][-1]["content"]]
    assert len(interviewer) == 6 and {(r["temperature"], r["top_p"]) for r in interviewer} == {(0.2, 0.95)}
    judged = [r for r in requests if r not in interviewer]
    # asked once each, the unreadable one too, as the authors' scoring scripts do (evaluator.judge_reask=false)
    assert len(judged) == 9 * 5 and {r["max_tokens"] for r in judged} == {512}
    # a system message, then the prompt, as the authors send them (rpbench's wording by default)
    assert {(r["messages"][0]["role"], r["messages"][0]["content"]) for r in judged} == {
        ("system", DEFAULTS["judge_system"])
    }
    assert {r["messages"][0]["content"] for r in interviewer} == {DEFAULTS["interviewer_system"]}
    assert all([m["role"] for m in r["messages"]] == ["system", "user"] for r in requests)
    judgements = [json.loads(line) for line in (run / "judgements.jsonl").open()]
    [unread] = [j for j in judgements if j["status"] != "ok"]
    assert (unread["id"], unread["aspect"], unread["status"], unread["attempts"]) == (
        "single/Curie/0",
        "stability",
        "parse_failure",
        1,
    )
    assert table["single"]["aspects"]["stability"]["parse_failures"] == 1
    scores = [json.loads(line) for line in (run / "scores.jsonl").open()]
    assert len(scores) == 9 and scores[1]["verdicts"] == aspects
    assert scores[0]["verdicts"] == {**aspects, "stability": None}
    agreement = results["judge_agreement"]  # the judge gave 6 for personality, 4 for memory
    assert (agreement["n_compared"], agreement["n_without_verdict"]) == (2, 0)
    assert agreement["mae"] == pytest.approx((abs(6 - 17 / 3) + abs(4 - 11 / 3)) / 2)
    report = (run / "report.md").read_text()
    assert "Character-LLM interviews" in report and "| turns | 3 |" in report
    assert "## Judge agreement with human ratings" in report
    assert json.loads((run / "metrics.json").read_text())["eval"]["prompts"]["score_memory"]["origin"] == "rpbench"


@pytest.mark.slow
def test_both_settings_run_against_the_local_judge_server(tmp_path, run_in_process):
    """rpbench's own server (a tiny random model) as interviewer and judge: its replies carry no score, so
    every judgement is a parse failure, counted and left out of the means, not scored 0: the run has no headline
    and fails, its metrics.json written."""
    from rpbench.pipeline import RunFailed

    run = tmp_path / "run"
    with pytest.raises(RunFailed, match=r"its headline \(single-turn average\) has no value"):
        run_in_process(
            run,
            "objective=none",
            "logger=none",
            "data=sample_characterllm",
            "evaluator=characterllm",
            "evaluator.max_turns=1",
            "evaluator.interviewer.max_tokens=8",
            "evaluator.generation.max_new_tokens=4",
            "evaluator.bootstrap.n_resamples=10",
            "judge=local",
            "evaluator.judge_max_tokens=4",
            "judge.parse_tries=1",
            "judge.cache_path=null",
            "judge.progress=false",
        )
    results = json.loads((run / "metrics.json").read_text())["eval"]
    for setting in ("single", "turns"):
        for summary in results["characterllm"][setting]["aspects"].values():
            assert summary["n"] + summary["n_missing"] == results["characterllm"][setting]["n_interviews"]
            assert summary["parse_failures"] + summary["request_failures"] == summary["n_missing"]
    judgements = [json.loads(line) for line in (run / "judgements.jsonl").open()]
    assert len(judgements) == 5 * results["n_records"]
    assert all(j["status"] in ("ok", "parse_failure") for j in judgements)


def test_the_authors_templates_are_read_from_a_clone_with_their_sha256(tmp_path):
    import hashlib

    from rpbench.data.characterllm_prompts import ASPECTS, DEFAULTS, PROMPT_DIR, CharacterLLMPrompts
    from rpbench.data.templates import TemplateError, slots_of

    prompts = tmp_path / PROMPT_DIR
    prompts.mkdir(parents=True)
    files = {"character": "agent_meta_prompt_sft.txt", "interviewer": "agent_meta_prompt_interviewer_chatgpt.txt"}
    files.update({f"score_{a}": f"prompt_score_llm_{a}.txt" for a in ASPECTS})
    texts = {}
    for name, file in files.items():  # stand-ins with the authors' slots, written here
        texts[name] = f"Template {name}: " + " ".join("{" + slot + "}" for slot in slots_of(DEFAULTS[name]))
        (prompts / file).write_text(f"\n{texts[name]}\n\n")
    (tmp_path / "run_api_interview_single.py").write_text(
        "for name in names:\n    loc_time = 'A park - Morning'\n    status = f'{name} walks with a stranger.'\n"
    )
    (tmp_path / "run_api_score_single.py").write_text("reply = ask('gpt', prompt, sys_prompt='Judge well.')\n")
    (tmp_path / "api_call_util.py").write_text(
        "def ask(model, prompt, sys_prompt=None):\n    if sys_prompt:\n        sys_prompt_content = sys_prompt\n"
        "    else:\n        sys_prompt_content = 'Help.'\n"
    )
    loaded = CharacterLLMPrompts.load(tmp_path)
    record = loaded.record()
    assert (loaded.render("judge_system"), loaded.render("interviewer_system")) == ("Judge well.", "Help.")
    assert record["judge_system"]["origin"] == "run_api_score_single.py:sys_prompt"
    assert record["score_memory"] == {
        "origin": f"{PROMPT_DIR}/prompt_score_llm_memory.txt",
        "sha256": hashlib.sha256(texts["score_memory"].encode()).hexdigest(),
    }
    assert loaded.render("status", name="Curie") == "Curie walks with a stranger."
    assert record["loc_time"]["origin"] == "run_api_interview_single.py:loc_time"

    (prompts / files["score_values"]).write_text("Rate {agent_name} on {interactions} only.")
    with pytest.raises(TemplateError, match="prompt_score_llm_values.txt: slots"):
        CharacterLLMPrompts.load(tmp_path)
