"""RoleMRC rubric prompts, and judge_rolemrc against a real local server giving scripted verdicts."""

from __future__ import annotations

import json

import pytest

from rpbench.core.errors import DataFormatError
from rpbench.core.typed import plain
from rpbench.data.records import EvalExample, Turn
from rpbench.scoring.chat.client import ChatClient, client_opener
from rpbench.scoring.judge.rolemrc_rubrics import (
    REASK,
    RUBRICS,
    JudgePromptError,
    judge_rolemrc,
    load_prompts,
    nested_rule,
    rubric_messages,
)
from rpbench.serve.model import load_served_model
from rpbench.serve.running import serve_in_thread

SYSTEM = (
    "You are Captain Ada Reyes, a retired merchant-navy officer. You must answer in exactly two sentences. "
    "You speak bluntly and use sailing metaphors."
)


@pytest.fixture(scope="module")
def verdict_tokens(group_values):
    """The reply length of evaluator=rolemrc's judge (a 0/1 verdict)."""
    return group_values("evaluator", "rolemrc", "evaluator")["judge_max_tokens"]


def example(rid: str, dims: list[str], system: str = SYSTEM, **meta) -> EvalExample:
    prompt = (Turn("system", system), Turn("user", "Passage: tides follow the moon. How do tides work?"))
    return EvalExample(rid, prompt, f"reference reply of {rid}", "some_label", {"dimensions": dims, **meta})


@pytest.fixture(scope="module")
def tiny():
    return load_served_model("tiny-qwen2")


def test_rubric_names_are_the_seven_of_the_five_dimensions():
    assert sorted(RUBRICS) == sorted(
        [
            "knowledge_boundary.within",
            "knowledge_boundary.outside",
            "role_style",
            "nested",
            "multi_turn.answerable",
            "multi_turn.unanswerable",
            "prioritized",
        ]
    )


# The RoleMRC authors' test label -> dimension table (interpretation/interpret.py, evaluation/llm_judge.py),
# in the paper's dimension names (Sec. 4.3, Table 9).
AUTHORS_DIMENSIONS = {
    "role_related_mrc_answer_with_narration": ["Knowledge Boundary", "Role Style"],
    "role_related_mrc_answer_no_narration": ["Knowledge Boundary"],
    "role_unrelated_mrc_refused_with_narration": ["Knowledge Boundary"],
    "role_unrelated_mrc_refused_no_narration": ["Knowledge Boundary", "Role Style"],
    "role_related_mrc_refused_with_narration": ["Knowledge Boundary"],
    "role_unrelated_mrc_answer_with_narration": ["Knowledge Boundary"],
    "role_related_mrc_refused_no_narration": ["Role Style"],
    "role_unrelated_mrc_answer_no_narration": ["Role Style"],
    "role_related_mrc_answer_with_narration-special-content": ["Nested"],
    "role_related_mrc_answer_with_narration-special-format": ["Nested"],
    "role_related_mrc_answer_no_narration-special-content": ["Nested"],
    "role_related_mrc_answer_no_narration-special-format": ["Nested"],
    "role_related_mrc_refused_with_narration-2ndrefused": ["Multi-turn"],
    "role_related_mrc_refused_no_narration-2ndrefused": ["Multi-turn"],
    "role_unrelated_mrc_refused_with_narration-2ndanswer": ["Multi-turn"],
    "role_unrelated_mrc_refused_no_narration-2ndanswer": ["Multi-turn"],
    "role_related_mrc_answer_with_narration-refused": ["Prioritized"],
    "role_related_mrc_answer_no_narration-refused": ["Prioritized"],
}


def test_five_dimensions_of_every_test_label_are_the_authors():
    from omegaconf import OmegaConf

    from rpbench.core.paths import CONF_DIR
    from rpbench.scoring.judge.rolemrc_rubrics import DIMENSIONS, dimensions_of

    table = OmegaConf.load(CONF_DIR / "data" / "rolemrc.yaml").task_dimensions
    ours = {label: [DIMENSIONS[d] for d in dimensions_of(rubrics)] for label, rubrics in table.items()}
    assert ours == AUTHORS_DIMENSIONS
    assert list(DIMENSIONS.values()) == ["Knowledge Boundary", "Role Style", "Multi-turn", "Nested", "Prioritized"]


def test_nested_rule_is_taken_from_the_system_prompt():
    assert nested_rule(example("a", ["nested"])) == "answer in exactly two sentences"
    assert nested_rule(example("b", ["nested"], nested_rule="rhyme every line")) == "rhyme every line"
    with pytest.raises(DataFormatError, match="record c.*system"):
        nested_rule(example("c", ["nested"], system="You are a pirate"))


def test_prompt_holds_setting_dialogue_response_and_criterion_but_no_reference():
    system, user = rubric_messages("nested", example("a", ["nested"]), "THE-MODEL-REPLY")
    assert system["role"] == "system" and user["role"] == "user"
    text = user["content"]
    for part in (SYSTEM, "How do tides work?", "THE-MODEL-REPLY", '"answer in exactly two sentences"'):
        assert part in text
    assert "reference" not in text.lower()  # reference-free, as the paper's judge (Sec. 4.3)
    answerable = rubric_messages("multi_turn.answerable", example("a", []), "r")[1]["content"]
    unanswerable = rubric_messages("multi_turn.unanswerable", example("a", []), "r")[1]["content"]
    assert "ANSWERABLE" in answerable and "UNANSWERABLE" in unanswerable
    assert "WITHIN" in rubric_messages("knowledge_boundary.within", example("a", []), "r")[1]["content"]
    with pytest.raises(ValueError, match="unknown rubric"):
        rubric_messages("humour", example("a", []), "r")


def write_prompt_file(tmp_path, rubrics: dict, system=None, name="prompts.yaml"):
    path = tmp_path / name
    path.write_text(json.dumps({"system": system, "rubrics": rubrics}))
    return path


AUTHORS_STYLE = {rubric: 'Judge "{response}" ({transcript})' for rubric in RUBRICS}
AUTHORS_STYLE["nested"] = 'Rule **{rule}**:\n{transcript}# Response:\n"{response}"\nScore:'


def test_prompt_file_templates_are_used_verbatim(tmp_path):
    prompts = load_prompts(write_prompt_file(tmp_path, AUTHORS_STYLE))
    assert prompts.system is None and prompts.version.startswith("file:prompts.yaml:")
    (user,) = rubric_messages("nested", example("a", ["nested"]), "Aye.", prompts)
    assert user == {
        "role": "user",
        "content": "Rule **answer in exactly two sentences**:\n"
        f'System Instruction: "{SYSTEM}"\n'
        'User Query: "Passage: tides follow the moon. How do tides work?"\n'
        '# Response:\n"Aye."\nScore:',
    }
    with_system = load_prompts(write_prompt_file(tmp_path, AUTHORS_STYLE, system="Be fair.", name="b.json"))
    assert rubric_messages("role_style", example("a", []), "x", with_system)[0] == {
        "role": "system",
        "content": "Be fair.",
    }


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"nested": "{response} vs {reference}"}, r"rubrics.nested: \{reference\} is not available: .*reference-free"),
        (
            {"role_style": "{response} {character}"},
            r"rubrics.role_style: unknown placeholder \{character\}; use system",
        ),
        ({"prioritized": "no reply shown"}, r"rubrics.prioritized: the template must show the reply judged"),
        ({"nested": "{response} {rule"}, r"rubrics.nested: not a valid format string"),
        ({"nested": "{response!r}"}, r"rubrics.nested: unknown placeholder"),
        ({"humour": "{response}"}, r"missing \[\], unknown \['humour'\]"),
    ],
)
def test_bad_prompt_files_are_named(tmp_path, change, message):
    path = write_prompt_file(tmp_path, {**AUTHORS_STYLE, **change})
    with pytest.raises(JudgePromptError, match=f"{tmp_path}.*{message}"):
        load_prompts(path)


def test_prompt_file_must_name_every_rubric_and_exist(tmp_path):
    rubrics = {k: v for k, v in AUTHORS_STYLE.items() if k != "role_style"}
    with pytest.raises(JudgePromptError, match=r"missing \['role_style'\]"):
        load_prompts(write_prompt_file(tmp_path, rubrics))
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    with pytest.raises(JudgePromptError, match="list.yaml: expected a mapping with keys 'rubrics'"):
        load_prompts(tmp_path / "list.yaml")
    with pytest.raises(FileNotFoundError, match="judge prompt file not found"):
        load_prompts(tmp_path / "absent.yaml")


@pytest.fixture(scope="module")
def judge_client(judge_config):
    def judge_client(tiny, server, tmp_path, parse_tries: int = 3, parse_failure: str = "wrong") -> ChatClient:
        settings = {
            "model": server.model_name,
            "base_url": server.base_url,
            "api_key_env": None,
            "progress": False,
            "parse_tries": parse_tries,
            "parse_failure": parse_failure,
            "cache_path": str(tmp_path / "judge.sqlite"),
        }
        return ChatClient(judge_config(**settings))

    return judge_client


# The judge answers by what the model reply says: a real server, a scripted judge.
VERDICTS = {
    "REPLY-GOOD": "1",
    "REPLY-BAD": "Score: 0",
    "REPLY-MUDDLED": "I think it is fine",
    REASK: "fine, I guess",
}
RECORDS = [
    (example("r1", ["knowledge_boundary.within", "role_style"]), "REPLY-GOOD"),
    (example("r2", ["nested"]), "REPLY-BAD"),
    (example("r3", ["multi_turn.answerable"]), "REPLY-MUDDLED"),
    (example("r4", ["prioritized"]), "REPLY-GOOD"),
    (example("r5", ["knowledge_boundary.outside"]), "REPLY-BAD"),
]


def test_accuracy_counts_and_parse_failures_per_rubric(tiny, tmp_path, scripted, verdict_tokens, judge_client):
    """judge.parse_failure=exclude: an unreadable verdict is left out of the accuracy (counted)."""
    examples = [e for e, _ in RECORDS]
    predictions = {e.id: reply for e, reply in RECORDS}
    with serve_in_thread(tiny, make_server=scripted(replies=VERDICTS)) as server:
        result = judge_rolemrc(
            examples, predictions, judge_client(tiny, server, tmp_path, parse_failure="exclude"), verdict_tokens
        )
        # 6 judgements, then 2 re-asks of the muddled one (3 tries in all)
        assert server.stats.requests == 6 + 2
        again = judge_rolemrc(
            examples, predictions, judge_client(tiny, server, tmp_path, parse_failure="exclude"), verdict_tokens
        )
        assert server.stats.requests == 8  # the re-run is served from the cache
    assert again["rubrics"] == result["rubrics"] and result["parse_failure"] == "exclude"

    rubrics = result["rubrics"]
    assert rubrics["knowledge_boundary.within"] == {
        "n": 1,
        "judged": 1,
        "correct": 1,
        "parse_failures": 0,
        "request_failures": 0,
        "accuracy": 1.0,
    }
    assert rubrics["nested"]["accuracy"] == 0.0 and rubrics["nested"]["correct"] == 0
    assert rubrics["multi_turn.answerable"] == {
        "n": 1,
        "judged": 0,
        "correct": 0,
        "parse_failures": 1,
        "request_failures": 0,
        "accuracy": None,
    }
    assert result["dimensions"]["knowledge_boundary"] == {
        "n": 2,
        "judged": 2,
        "correct": 1,
        "parse_failures": 0,
        "request_failures": 0,
        "accuracy": 0.5,
    }
    assert list(result["dimensions"]) == ["knowledge_boundary", "role_style", "nested", "multi_turn", "prioritized"]
    assert result["overall"] == {
        "n": 6,
        "judged": 5,
        "correct": 3,
        "parse_failures": 1,
        "request_failures": 0,
        "accuracy": 0.6,
    }
    r1, _, r3 = result["records"][:3]
    assert r1["verdicts"] == {"knowledge_boundary.within": 1, "role_style": 1}
    assert r3["verdicts"] == {"multi_turn.answerable": None}
    assert r3["status"] == {"multi_turn.answerable": "parse_failure"}
    assert r3["attempts"] == {"multi_turn.answerable": 3} and r3["replies"]["multi_turn.answerable"] == "fine, I guess"


def test_an_unreadable_verdict_counts_as_wrong_by_default_as_the_release(
    tiny, tmp_path, scripted, verdict_tokens, judge_client
):
    # llm_judge.py: int(reply) fails -> score 0, kept in the mean, counted as a bad response.
    # Of 6 judgements 3 are 1, 2 are 0 and 1 is unreadable: accuracy 3/6 (exclude: 3/5).
    examples = [e for e, _ in RECORDS]
    predictions = {e.id: reply for e, reply in RECORDS}
    with serve_in_thread(tiny, make_server=scripted(replies=VERDICTS)) as server:
        result = judge_rolemrc(examples, predictions, judge_client(tiny, server, tmp_path), verdict_tokens)
    assert result["parse_failure"] == "wrong"
    assert result["overall"] == {
        "n": 6,
        "judged": 5,
        "correct": 3,
        "parse_failures": 1,
        "request_failures": 0,
        "accuracy": 0.5,
    }
    assert result["rubrics"]["multi_turn.answerable"]["accuracy"] == 0.0
    r3 = result["records"][2]
    assert r3["verdicts"] == {"multi_turn.answerable": 0} and r3["status"] == {"multi_turn.answerable": "parse_failure"}


def test_judge_parse_failure_policy_is_checked(judge_config):
    with pytest.raises(ValueError, match="judge.parse_failure='zero': expected one of wrong, exclude"):
        judge_config(model="m", parse_failure="zero")


def test_a_re_asked_verdict_that_parses_counts(tiny, tmp_path, scripted, verdict_tokens, judge_client):
    examples = [RECORDS[2][0]]
    with serve_in_thread(tiny, make_server=scripted(replies={**VERDICTS, REASK: "1"})) as server:
        result = judge_rolemrc(examples, {"r3": "REPLY-MUDDLED"}, judge_client(tiny, server, tmp_path), verdict_tokens)
    assert result["overall"]["accuracy"] == 1.0 and result["overall"]["parse_failures"] == 0
    assert result["records"][0]["attempts"] == {"multi_turn.answerable": 2}


def test_a_judge_config_is_opened_with_the_local_server_handed_in(
    tmp_path, tiny_model, judge_config, scripted_judge, verdict_tokens
):
    judge = judge_config(
        backend="local",
        model="local",
        parse_tries=1,
        cache_path=str(tmp_path / "judge.sqlite"),
        server={"model": plain(tiny_model(end_of_turn="<|im_end|>"))},  # a model config mapping
    )
    opener = client_opener(scripted_judge(replies={"REPLY-GOOD": "1"}))
    result = judge_rolemrc([RECORDS[0][0]], {"r1": "REPLY-GOOD"}, judge, verdict_tokens, opener=opener)
    assert result["judge_model"] == "tiny:qwen2"
    assert result["overall"]["accuracy"] == 1.0 and result["overall"]["n"] == 2


def test_bad_inputs_are_named(judge_config, verdict_tokens):
    client = ChatClient(
        judge_config(**{"model": "m", "base_url": "http://127.0.0.1:9/v1", "api_key_env": None, "progress": False})
    )
    with pytest.raises(ValueError, match=r"1 test records have no prediction.*r2"):
        judge_rolemrc([RECORDS[1][0]], {}, client, verdict_tokens)
    with pytest.raises(DataFormatError, match="record x.*meta.dimensions"):
        judge_rolemrc([example("x", ["humour"])], {"x": "r"}, client, verdict_tokens)
    with pytest.raises(DataFormatError, match="record y.*meta.dimensions"):
        judge_rolemrc([example("y", [])], {"y": "r"}, client, verdict_tokens)
