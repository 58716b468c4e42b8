"""MMRole-Eval judge prompts (Dai et al., ICLR 2025): one pairwise comparison per metric.

The evaluated answer is Model A, the ground truth Model B; the judge writes a short comparison ending in
``[Scores]: (a, b)`` (1-10 each). The judge (``rpbench.eval.mmrole_eval``) and the reward model's training
data (``rpbench.data.mmrole_reviews``) use the same prompts, so they live in the data layer. The section
markers, metric questions and output-format line follow the MMRole repository's ``eval/RM_review.py`` (MIT
licence, Copyright (c) 2024 YanqiDai) because the released MMRole-Eval reward model was trained on exactly
this input; changing them would change its scores.
"""

from __future__ import annotations

import math
import re

PROMPT_VERSION = "mmrole-eval-v1"
TASK = "mmrole"

METRICS: tuple[str, ...] = (
    "Instruction Adherence",
    "Fluency",
    "Coherency",
    "Image-Text Relevance",
    "Response Accuracy",
    "Personality Consistency",
    "Knowledge Consistency",
    "Tone Consistency",
)

JUDGE_SYSTEM = (
    "You are an objective and precise evaluator, specializing in rigorously assessing the "
    "role-playing and multimodal understanding abilities of various models."
)
REASK = (
    "That evaluation could not be read. Give it again, ending with exactly one line of the form "
    "[Scores]: (score of Model A, score of Model B), each from 1 to 10."
)

HYPOTHETICAL = "Hypothetical Characters"
CURIOUS_HUMAN = "a curious human"


def _with_script(name: str, script: str) -> str:
    if name == CURIOUS_HUMAN:
        return name
    if script == HYPOTHETICAL:
        return f"{name}, a person who is one of the Hypothetical Characters,"
    return f"{name} from {script}"


def task_instruction(role: str, script: str, other_role: str) -> str:
    return (
        f"The task instruction of the two models is to directly role-play as {_with_script(role, script)} "
        f"and talk with {_with_script(other_role, script)} about the given image using the distinctive "
        f"tone, manner and vocabulary of {role}."
    )


def metric_question(metric: str, role: str, other_role: str) -> str:
    """The question the judge answers for one metric."""
    other = "the curious human" if other_role == CURIOUS_HUMAN else other_role
    questions = {
        "Instruction Adherence": (
            f"Do the responses accurately adhere to the task instruction, directly "
            f"role-playing as {role} and only including words that {role} should say, "
            f"without any additional explanatory prefixes or suffixes?"
        ),
        "Fluency": "Are the responses grammatically correct and smoothly articulated?",
        "Coherency": (
            "Do the responses maintain a coherent thread of dialogue without contradicting earlier "
            "parts of the conversation or previously established facts?"
        ),
        "Image-Text Relevance": "Are the responses closely related to the visual content of the image?",
        "Response Accuracy": (
            f"Do the responses accurately answer {other}'s words or appropriately initiate a "
            f"conversation based on the image?"
        ),
        "Personality Consistency": f"Do the responses accurately and sufficiently reflect the personality of {role}?",
        "Knowledge Consistency": (
            f"Are the responses consistent with the factual knowledge that {role} should "
            f"possess, including experiences, abilities, and relationships?"
        ),
        "Tone Consistency": (
            f"Do the responses maintain a consistent tone that aligns with {role}'s typical "
            f"manner of speaking and catchphrases, rather than resembling the style of AI "
            f"assistants?"
        ),
    }
    return f"{metric}: {questions[metric]}"


def review_prompt(
    metric: str, *, question: str, answer_a: str, answer_b: str, role: str, script: str, other_role: str
) -> str:
    """The judge's user message for one metric: A and B are the two responses in presentation order."""
    if metric not in METRICS:
        raise ValueError(f"unknown MMRole-Eval metric {metric!r}; known: {METRICS}")
    sections = [
        ("Question", question),
        ("Model A's Response", answer_a),
        ("Model B's Response", answer_b),
    ]
    body = "".join(f"## **[{name} Start]**\n\n{text}\n\n## **[{name} End]**\n\n\n" for name, text in sections)
    return (
        f"{body}## **[Instruction]**\n\n{task_instruction(role, script, other_role)}\n\n"
        "Please evaluate the following aspect of each model's response:\n"
        f"{metric_question(metric, role, other_role)}\n\n"
        "Please provide a brief qualitative evaluation for the relative performance of the two models, followed by "
        "paired quantitative scores from 1 to 10, where 1 indicates poor performance and 10 indicates excellent "
        "performance.\n\n"
        "The output should be in the following format:\n"
        "{Qualitative Evaluation}, [Scores]: ({the score of Model A}, {the score of Model B})\n\n"
        "Please ensure that your evaluations are unbiased and that the order in which the responses were "
        "presented does not affect your judgment."
    )


_NUMBER = r"([0-9]+(?:\.[0-9]+)?)"
_SCORES_MARK = "[Scores]:"
# "(a, b)" right after the marker; each number may carry a label ("Model A: 7").
_PAIR = re.compile(rf"^\s*\(\s*(?:[^,():]*:\s*)?{_NUMBER}\s*,\s*(?:[^,():]*:\s*)?{_NUMBER}\s*\)")


def parse_score_pair(text: str, low: float = 1.0, high: float = 10.0) -> tuple[float, float] | None:
    """``(a, b)`` from a review ending in ``..., [Scores]: (a, b)``.

    The marker must occur exactly once and both scores must lie in [low, high]; otherwise None (a parse
    failure, never a guessed score).
    """
    if text.count(_SCORES_MARK) != 1:
        return None
    match = _PAIR.match(text.split(_SCORES_MARK, 1)[1])
    if match is None:
        return None
    a, b = float(match.group(1)), float(match.group(2))
    if not all(math.isfinite(x) and low <= x <= high for x in (a, b)):
        return None
    return a, b
