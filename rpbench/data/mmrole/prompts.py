"""MMRole-Eval judge prompts (Dai et al., ICLR 2025): one pairwise comparison per metric.

The evaluated answer is Model A, the ground truth Model B; the judge writes a short comparison ending in
``[Scores]: (a, b)`` (1-10 each). The judge (``rpbench.eval.benchmarks.mmrole.judging``) and the reward model's training
data (``rpbench.data.mmrole.reviews``, ``rpbench.data.mmrole.rm``) use the same prompts, so they live in the
data layer.

The wording is rpbench's own, with the structure and slots of the authors' reward-model prompt
(``eval/RM_review.py``: a system prompt; question, Model A's and Model B's responses in marked sections;
the task instruction; one metric's question; the output format). ``review_prompts(source)`` with a clone
of the authors' repository (config ``prompts.source``) reads their templates instead
(``rpbench.data.templates``): the released MMRole-Eval reward model was trained on exactly that input, so
judging with it, or distilling it, should use them. Each template's origin and sha256 are recorded.
"""

from __future__ import annotations

import functools
import hashlib
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from rpbench.data.templates import Released, Template, resolve

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

REASK = (
    "That evaluation could not be read. Give it again, ending with exactly one line of the form "
    "[Scores]: (score of Model A, score of Model B), each from 1 to 10."
)

HYPOTHETICAL = "Hypothetical Characters"
CURIOUS_HUMAN = "a curious human"  # the other_role of MMRole's human-role records (a data value)
RELEASED_FILE = "eval/RM_review.py"

# rpbench's wording. Slots as the authors': role_script / other_role_script (a character with its
# series), role, the_other_role (the partner as the metric questions name it), and the review's sections.
DEFAULTS: dict[str, str] = {
    "system": (
        "You are an impartial, exacting judge of how well models play a character and understand the image "
        "they are shown."
    ),
    "task": (
        "Both models were asked to speak directly as {role_script}, in conversation with {other_role_script}, "
        "about the image shown, in the voice, manner and words of {role}."
    ),
    "hypothetical_suffix": ", one of the Hypothetical Characters,",
    "script_joiner": " from ",
    "review": (
        "### Question\n\n{question}\n\n\n"
        "### Response of Model A\n\n{answer_a}\n\n\n"
        "### Response of Model B\n\n{answer_b}\n\n\n"
        "### Instruction\n\n{task}\n\n"
        "Judge both responses on this aspect only:\n{aspect}\n\n"
        "First compare the two responses on it in a few sentences, then score each from 1 (very poor) to 10 "
        "(excellent).\n\n"
        "Answer in this form:\n<comparison>, [Scores]: (<score of Model A>, <score of Model B>)\n\n"
        "Judge the content alone: the order in which the responses appear must not sway you."
    ),
    "aspect.Instruction Adherence": (
        "Instruction Adherence: Do the responses speak directly as {role}, with only what {role} would say and "
        "nothing added before or after to explain?"
    ),
    "aspect.Fluency": "Fluency: Are the responses grammatical and do they read smoothly?",
    "aspect.Coherency": (
        "Coherency: Do the responses follow on from the conversation without contradicting what was said or "
        "established before?"
    ),
    "aspect.Image-Text Relevance": "Image-Text Relevance: Do the responses relate closely to what the image shows?",
    "aspect.Response Accuracy": (
        "Response Accuracy: Do the responses answer what {the_other_role} said, or open the conversation "
        "fittingly from the image?"
    ),
    "aspect.Personality Consistency": (
        "Personality Consistency: Do the responses show the personality of {role} faithfully and fully?"
    ),
    "aspect.Knowledge Consistency": (
        "Knowledge Consistency: Do the responses agree with what {role} knows, has lived through, can do and "
        "who {role} is related to?"
    ),
    "aspect.Tone Consistency": (
        "Tone Consistency: Do the responses keep to {role}'s usual way of speaking and catchphrases, rather "
        "than sounding like an AI assistant?"
    ),
}
# Where the authors keep each (their eval/RM_review.py).
RELEASED: dict[str, Released] = {
    "system": Released(RELEASED_FILE, "system", occurrence=1),  # occurrence 0: the model.chat(system=...) call
    "task": Released(RELEASED_FILE, "task"),
    "hypothetical_suffix": Released(RELEASED_FILE, "role_script"),
    "script_joiner": Released(RELEASED_FILE, "role_script", occurrence=1),
    "review": Released(
        RELEASED_FILE,
        "text",
        rename={"evaluated_answer": "answer_a", "groundtruth_answer": "answer_b", "aspect_desc[score_key]": "aspect"},
    ),
    **{f"aspect.{metric}": Released(RELEASED_FILE, "aspect_desc", key=metric) for metric in METRICS},
}


@dataclass(frozen=True)
class ReviewPrompts:
    """The judge's templates, by name (``DEFAULTS``' names), rpbench's or the authors'."""

    templates: Mapping[str, Template]

    @property
    def system(self) -> str:
        return self.templates["system"].render()

    @property
    def version(self) -> str:
        """Names the prompt set (part of the judge cache key): rpbench's or a digest of the authors'."""
        joined = "".join(self.templates[name].sha256 for name in DEFAULTS)
        return "mmrole-eval-v2-" + hashlib.sha256(joined.encode()).hexdigest()[:12]

    def records(self) -> dict[str, dict[str, str]]:
        """Each template's origin and sha256, as metrics.json records them."""
        return {f"mmrole_eval.{name}": t.record() for name, t in self.templates.items()}

    def with_script(self, name: str, script: str) -> str:
        if name == CURIOUS_HUMAN:
            return name
        if script == HYPOTHETICAL:
            return name + self.templates["hypothetical_suffix"].render()
        return name + self.templates["script_joiner"].render() + script

    def task_instruction(self, role: str, script: str, other_role: str) -> str:
        return self.templates["task"].render(
            role_script=self.with_script(role, script),
            other_role_script=self.with_script(other_role, script),
            role=role,
        )

    def metric_question(self, metric: str, role: str, other_role: str) -> str:
        """The aspect line of one metric: ``<metric>: <question>``."""
        if metric not in METRICS:
            raise ValueError(f"unknown MMRole-Eval metric {metric!r}; known: {METRICS}")
        template = self.templates[f"aspect.{metric}"]
        values = {"role": role, "the_other_role": "the curious human" if other_role == CURIOUS_HUMAN else other_role}
        return template.render(**{slot: values[slot] for slot in template.slots})

    def review(
        self, metric: str, *, question: str, answer_a: str, answer_b: str, role: str, script: str, other_role: str
    ) -> str:
        """The judge's user message for one metric: A and B are the two responses in presentation order."""
        return self.templates["review"].render(
            question=question,
            answer_a=answer_a,
            answer_b=answer_b,
            task=self.task_instruction(role, script, other_role),
            aspect=self.metric_question(metric, role, other_role),
        )


@functools.cache
def review_prompts(source: str | None = None) -> ReviewPrompts:
    """rpbench's prompts (``source`` None) or the authors', read from the clone at ``source``."""
    return ReviewPrompts({name: resolve(name, text, RELEASED[name], source) for name, text in DEFAULTS.items()})


DEFAULT_PROMPTS = review_prompts(None)
JUDGE_SYSTEM = DEFAULT_PROMPTS.system


def review_prompt(
    metric: str,
    *,
    question: str,
    answer_a: str,
    answer_b: str,
    role: str,
    script: str,
    other_role: str,
    prompts: ReviewPrompts = DEFAULT_PROMPTS,
) -> str:
    """``prompts.review`` (rpbench's wording by default)."""
    return prompts.review(
        metric, question=question, answer_a=answer_a, answer_b=answer_b, role=role, script=script, other_role=other_role
    )


_NUMBER = r"([0-9]+(?:\.[0-9]+)?)"
_SCORES_MARK = "[Scores]:"
# "(a, b)" right after the marker; each number may carry a label ("Model A: 7").
_PAIR = re.compile(rf"^\s*\(\s*(?:[^,():]*:\s*)?{_NUMBER}\s*,\s*(?:[^,():]*:\s*)?{_NUMBER}\s*\)")


def parse_score_pair(text: str, low: float = 1.0, high: float = 10.0) -> tuple[float, float] | None:
    """``(a, b)`` from a review ending in ``..., [Scores]: (a, b)``: stricter than the authors'
    ``get_review_score`` (``parse_score_pair_as_authors``).

    The marker must occur exactly once, the pair must be in parentheses right after it (each number may
    carry a label, ``Model A: 7``), and both scores must lie in [low, high]; otherwise None (a parse
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


def parse_score_pair_as_authors(text: str) -> tuple[float, float] | None:
    """``(a, b)`` as the authors' ``get_review_score`` (``eval/RM_review.py``) reads it from a review.

    The marker must occur exactly once; the first non-empty line after it, without its parentheses, must
    split at commas into two fields; a field with a colon keeps the text between its first and second colon
    (a label, ``A: 8``); each field must then be a Python float. No range check: ``[Scores]: 8, 7``,
    ``(A: 8, B: 7)``, ``(0, 11)`` and ``(-2, 1e1)`` are read. Where the authors' scripts would go on with
    a pair that has no score a/b, it is None here (a parse failure): a non-finite number (``nan``) or
    b = 0 (their ``RM_result.py`` stops on the division).
    """
    if text.count(_SCORES_MARK) != 1:
        return None
    line = text.split(_SCORES_MARK, 1)[1].strip().split("\n", 1)[0]
    fields = line.replace("(", "").replace(")", "").split(",")
    if len(fields) != 2:
        return None
    try:
        a, b = (float(f.split(":")[1] if ":" in f else f) for f in fields)
    except ValueError:
        return None
    return (a, b) if math.isfinite(a) and math.isfinite(b) and b != 0 else None


# How a review's score pair is read (``evaluator.score_parse`` of ``evaluator=mmrole_rm``).
SCORE_PARSERS = {"authors": parse_score_pair_as_authors, "strict": parse_score_pair}
