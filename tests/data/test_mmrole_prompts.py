"""MMRole-Eval judge prompts: rpbench's wording by default, the authors' read from a clone (prompts.source)
with each template's origin and sha256. The clone here is written for the test in the layout of the authors'
eval/RM_review.py (their variable names, slots and f-string structure; not their text)."""

from __future__ import annotations

import hashlib

import pytest

from rpbench.data.mmrole.prompts import DEFAULTS, METRICS, review_prompts
from rpbench.data.templates import TemplateError

FAKE_RM_REVIEW = """
def chat(system, question):
    return model.chat(query=question, system=system)

for data in data_list:
    role, script, other_role = data["role"], data["script"], data["other_role"]
    question = data["q"]
    evaluated_answer, groundtruth_answer = data["a"], data["b"]
    if script == "Hypothetical Characters":
        role_script = role + " (made up)"
    else:
        role_script = role + " of "
    the_other_role = other_role
    task = f"TASK as {role_script} with {other_role_script} like {role}."
    system = "SYSTEM."
    aspect_desc = {
        "Instruction Adherence": f"Instruction Adherence: IA {role}?",
        "Fluency": "Fluency: FL?",
        "Coherency": "Coherency: CO?",
        "Image-Text Relevance": "Image-Text Relevance: IT?",
        "Response Accuracy": f"Response Accuracy: RA {the_other_role}?",
        "Personality Consistency": f"Personality Consistency: PC {role}?",
        "Knowledge Consistency": f"Knowledge Consistency: KC {role}?",
        "Tone Consistency": f"Tone Consistency: TC {role}?",
    }
    for score_key in aspect_desc:
        text = (
            f"Q[{question}] A[{evaluated_answer}] B[{groundtruth_answer}] "
            f"T[{task}] M[{aspect_desc[score_key]}] "
            "{literal}, [Scores]: (a, b)"
        )
"""


@pytest.fixture
def clone(tmp_path):
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "RM_review.py").write_text(FAKE_RM_REVIEW)
    return str(tmp_path)


def test_default_prompts_are_rpbenchs_and_recorded():
    prompts = review_prompts(None)
    records = prompts.records()
    assert set(records) == {f"mmrole_eval.{name}" for name in DEFAULTS}
    assert all(r["origin"] == "rpbench" for r in records.values())
    assert records["mmrole_eval.review"]["sha256"] == hashlib.sha256(DEFAULTS["review"].encode()).hexdigest()
    text = prompts.review(
        "Fluency", question="Q?", answer_a="A.", answer_b="B.", role="Ann", script="S", other_role="Bo"
    )
    assert "Q?" in text and "A." in text and "B." in text and "\nFluency: " in text and "Ann from S" in text


def test_the_authors_prompts_from_a_clone(clone):
    prompts = review_prompts(clone)
    assert prompts.system == "SYSTEM."
    text = prompts.review(
        "Response Accuracy", question="q", answer_a="x", answer_b="y", role="Ann", script="S", other_role="Bo"
    )
    task = "TASK as Ann of S with Bo of S like Ann."
    assert text == f"Q[q] A[x] B[y] T[{task}] M[Response Accuracy: RA Bo?] {{literal}}, [Scores]: (a, b)"
    hypothetical = prompts.task_instruction("Ann", "Hypothetical Characters", "a curious human")
    assert hypothetical == "TASK as Ann (made up) with a curious human like Ann."
    assert (
        prompts.metric_question("Response Accuracy", "Ann", "a curious human")
        == "Response Accuracy: RA the curious human?"
    )
    records = prompts.records()
    assert records["mmrole_eval.system"] == {
        "origin": "eval/RM_review.py:system#1",
        "sha256": hashlib.sha256(b"SYSTEM.").hexdigest(),
    }
    assert records["mmrole_eval.aspect.Fluency"]["origin"] == "eval/RM_review.py:aspect_desc['Fluency']"
    assert prompts.version != review_prompts(None).version  # the judge cache tells the prompt sets apart
    assert [prompts.metric_question(m, "Ann", "Bo").split(":")[0] for m in METRICS] == list(METRICS)


def test_a_clone_missing_the_file_or_a_metric_is_named(tmp_path, clone):
    with pytest.raises(TemplateError, match="RM_review.py: prompts.source=.*elsewhere is not a folder"):
        review_prompts(str(tmp_path / "elsewhere"))
    (tmp_path / "eval" / "RM_review.py").write_text(FAKE_RM_REVIEW.replace('"Fluency": "Fluency: FL?",', ""))
    with pytest.raises(TemplateError, match="aspect_desc has no key 'Fluency'"):
        review_prompts(str(tmp_path) + "/")
