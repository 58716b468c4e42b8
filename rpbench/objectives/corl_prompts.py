"""The prompts of CoRL (R-EMID paper, Li et al.): the thought policy's, the dialogue (pxy) policy's, the judge's.

Texts follow the authors' code (DAMO-ConvAI ``RPM-Generalization``: ``templates.py``, ``CoEvolve_RL.py``,
``policy_test.format_dialogue_simple``); shared notes: remid-code-notes.md section 3.

- The thought policy q1(r | x) gets the ``thought_completion`` template with the golden-response slot
  replaced by ``NO_REFERENCE``, so r depends on x alone. Its answer follows a Part 1-3 template ending in
  a fenced ``[Core Features of the Golden Response]`` block; ``core_features`` cuts r down to that block's
  text, the only part the dialogue policy sees.
- The dialogue policy q2(y | x, r) gets the ``model_pxy`` template plus the core features in a fenced
  block; its target is ``## Agent Response\\n{golden}`` (``pxy_target``).
- The judge gets the pxy prompt, the golden target as reference and a candidate, and is asked for the
  percentage of core features matched; its score of a candidate is the log-probability of ``100%``.

Persona and character are inserted with ``str()`` as the authors do (a character object becomes its
Python ``repr``). The dialogue is ``format_dialogue_simple``'s text of the context turns.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from rpbench.data.records import Turn

CORE_FEATURES_MARKER = "[Core Features of the Golden Response]"
NO_REFERENCE = "Please give your analysis without any given reference response"
JUDGE_TARGET = "100%"
RESPONSE_HEADER = "## Agent Response"

THOUGHT_SYSTEM = (
    'Please generate a thought process that outlines what characteristics a "golden response" should have, '
    "based on the given input information, following the provided format template."
)
PXY_SYSTEM = (
    "Please complete the agent response part after thinking the core features of the golden response to respond."
)
JUDGE_INSTRUCTION = (
    'If the given Reference Golden Response matches 100% with the "Core Features of the Golden Response" as '
    "described, then please determine what percentage of the Core Features is matched by the given Candidate "
    "Response. Please output the percentage value directly, without analysis."
)

INPUT_TEMPLATE = """
# Task Completion
## Input Information
### User Persona
'''
{user_persona}
'''

### Agent Character
'''
{agent_character}
'''

### Dialogue Context
'''
{dialogue_context}
'''
"""

# The authors' thought_completion template (its trailing spaces kept), with {inputs} and {golden} slots.
THOUGHT_TEMPLATE = (resources.files("rpbench") / "resources" / "corl" / "thought_prompt.txt").read_text(
    encoding="utf-8"
)

# The seven headers the thought-format reward checks (Part 1, the three "Key Information in ..." headers,
# the summary, Part 2, Part 3).
THOUGHT_SECTIONS: tuple[str, ...] = (
    r"###\s*Part 1:\s*Restatement of Key Information",
    r"####\s*Key Information in User Persona",
    r"####\s*Key Information in Agent Character",
    r"####\s*Key Information in Dialogue Context",
    r"###\s*Summary of Key Information",
    r"###\s*Part 2:\s*Iterative Revision",
    r"###\s*Part 3:\s*Final Feature Set of the Golden Response",
)
FENCED_CORE_FEATURES = re.compile(r"```[\s\S]*?" + re.escape(CORE_FEATURES_MARKER) + r"[\s\S]*?```")
RESPONSE_PATTERN = re.compile(r"##\s*Agent Response")


@dataclass(frozen=True)
class RolePlayInput:
    """The input x of a sample, as the CoRL prompts show it."""

    user_persona: str
    agent_character: str
    dialogue_context: str

    def as_text(self) -> str:
        return INPUT_TEMPLATE.format(
            user_persona=self.user_persona,
            agent_character=self.agent_character,
            dialogue_context=self.dialogue_context,
        )


def format_dialogue(context: Sequence[Turn]) -> str:
    """The authors' ``format_dialogue_simple``: numbered user queries and agent responses, ending with an
    open ``Agent Response n:`` for the final user query."""
    if not context or context[-1].role != "user" or any(t.role not in ("user", "assistant") for t in context):
        raise ValueError("a dialogue context is user/assistant turns ending on a user turn")
    blocks = []
    for turn_number, start in enumerate(range(0, len(context), 2), start=1):
        query = context[start].content
        if start + 1 < len(context):
            reply = context[start + 1].content
            blocks.append(f"User Query {turn_number}: {query}\nAgent Response {turn_number}: {reply}\n")
        else:
            blocks.append(f"User Query {turn_number}: {query}\n")
            last = turn_number
    return "\n".join([*blocks, f"Agent Response {last}: "])


def role_play_input(prompt: Sequence[Turn], meta: Mapping[str, Any]) -> RolePlayInput:
    """x of an RPGBench record: persona and character from its meta, the dialogue from its prompt turns."""
    context = [turn for turn in prompt if turn.role != "system"]
    return RolePlayInput(str(meta["persona"]), str(meta["character"]), format_dialogue(context))


def thought_prompt(x: RolePlayInput) -> list[Turn]:
    """The thought policy's prompt: x without the golden response (r depends on x alone)."""
    user = THOUGHT_TEMPLATE.format(inputs=x.as_text(), golden=NO_REFERENCE)
    return [Turn("system", THOUGHT_SYSTEM), Turn("user", user)]


def core_features(thought: str) -> str:
    """The text after the last core-features marker, fences removed (the whole text when there is no marker)."""
    return thought.split(CORE_FEATURES_MARKER)[-1].replace("```", "")


def pxy_user_text(x: RolePlayInput, features: str) -> str:
    return f"{x.as_text()}\n\n\n## Core Features of the Golden Response\n```{features}```\n\n"


def pxy_prompt(x: RolePlayInput, features: str) -> list[Turn]:
    """The dialogue policy's prompt: x and the core features of a thought."""
    return [Turn("system", PXY_SYSTEM), Turn("user", pxy_user_text(x, features))]


def pxy_target(golden: str) -> str:
    """The dialogue policy's target for a golden response."""
    return f"{RESPONSE_HEADER}\n{golden}"


def judge_prompt(x: RolePlayInput, features: str, golden: str, candidate: str) -> list[Turn]:
    """The judge's prompt comparing ``candidate`` with the golden target; it is scored on ``JUDGE_TARGET``."""
    text = (
        f"{pxy_user_text(x, features)}\n\n```Reference Golden Response: {pxy_target(golden)}```\n\n"
        f"```Candidate Response: {candidate}```\n\n {JUDGE_INSTRUCTION}\n\n Percentage: "
    )
    return [Turn("system", JUDGE_INSTRUCTION), Turn("user", text)]
