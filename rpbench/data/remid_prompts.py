"""The R-EMID paper's prompts: the evaluated policy's, the reasoning generator's, the critic's (pxy), CoRL's judge.

Each template has rpbench's own wording with the structure and slots of the authors' (DAMO-ConvAI
``RPM-Generalization``; remid-code-notes.md sections 2-3), and ``RELEASED`` says where the authors keep
theirs, so ``prompts.source=<clone of DAMO-ConvAI>`` runs with the authors' exact text
(``rpbench.data.templates``). Slots:

- ``policy_system`` / ``policy_user`` (released evaluation, ``policy_test.py``): one system message and one
  user message with the tagged persona, character and dialogue context; ``policy_user_naive``: the untagged
  layout the authors use for base LLMs without fine-tuning.
- ``thought_system`` / ``thought_user``: the reasoning generator q1(r | x); its golden-response slot is
  filled with ``no_reference`` at inference (r depends on x alone). The template's last fenced block
  begins with the core-features marker line (``RemidPrompts.marker``); the level-3/4 headers outside
  fences, numbered attempts aside, are the sections the format reward checks (``sections``).
- ``pxy_system`` / ``pxy_user`` + ``features_block``: the critic / dialogue policy p(y | x, r);
  ``response_target`` wraps a response as its target (``response_header`` is the text before the slot).
- ``judge_system`` / ``judge_instruction`` / ``judge_user``: CoRL's dialogue-reward judge, scored on
  ``JUDGE_TARGET``.

Persona and character enter as ``str()`` of the record's values (an object as its Python repr, as the
authors do); the dialogue as ``format_dialogue``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from rpbench.data.records import Turn
from rpbench.data.templates import Released, Template, TemplateError, resolve

JUDGE_TARGET = "100%"
_AUTHORS = "RPM-Generalization/"
_INPUTS = {"user_persona", "agent_character", "str_dialogue_context"}

DEFAULTS: dict[str, str] = {
    "policy_system": "You are talking with a user whose persona is given. Respond as the agent character given.",
    "policy_user": (
        "<persona>{user_persona}</persona>\n<character>{agent_character}</character>\n"
        "<dialogue>{str_dialogue_context}</dialogue>\n"
    ),
    "policy_user_naive": (
        "The user: {user_persona}\nYour character: {agent_character}\nThe conversation: {str_dialogue_context}\n"
    ),
    "thought_system": (
        "Work out, step by step, what the ideal next reply of the agent must contain and how it must sound, "
        "from the inputs given, and write your reasoning in the layout shown."
    ),
    "thought_user": """
# What to do
You get a user persona, an agent character and a dialogue context. Reason about the ideal next reply of the
agent, filling in the layout under "Reasoning layout" with what you infer from the inputs.

# Inputs
## The inputs
### User persona
'''
{user_persona}
'''

### Agent character
'''
{agent_character}
'''

### Dialogue context
'''
{str_dialogue_context}
'''

## Ideal reply (reference)
'''
{agent_golden_response}
'''

Write the reasoning in this layout.

## Reasoning layout

### Step 1: What the inputs say

#### From the user persona
- **What the user cares about**:
- **How the user lives and speaks**:
- **What the user wants right now**:

#### From the agent character
- **Who the agent is**:
- **How the agent thinks and feels**:
- **How the agent talks**:

#### From the dialogue context
- **Where the conversation stands**:
- **What the user just asked for**:

### Overview of the inputs

### Step 2: Drafts and checks

#### Draft 1
**What the reply must say:**
...

**A first reply:**
> ""

Check:
Fix:

#### Draft 2
**How the reply must sound:**
...

**A better reply:**
> ""

Check:
Fix:

### Step 3: Features of the ideal reply

The ideal reply has these features:

```
[Features of the Ideal Reply]

## Content
- fits the user persona:
- shows the agent character:
- continues the dialogue:

## Style
- tone suited to the user:
- voice of the agent character:
- natural in the dialogue flow:
```

## Reasoning
""",
    "no_reference": "(not given: infer the features from the inputs alone)",
    "pxy_system": "Write the agent's next reply, guided by the features the ideal reply should have.",
    "pxy_user": """
# Write the reply
## The inputs
### User persona
'''
{user_persona}
'''

### Agent character
'''
{agent_character}
'''

### Dialogue context
'''
{str_dialogue_context}
'''

""",
    "features_block": "{input}\n\n## Features of the Ideal Reply\n```{features}```\n\n",
    "response_target": "## Agent Reply\n{response}",
    "judge_system": (
        "Take the reference reply as matching the features of the ideal reply completely. Judge what share of "
        "those features the candidate reply has, and answer with a percentage only."
    ),
    "judge_instruction": (
        "Take the reference reply as matching the features of the ideal reply completely. Judge what share of "
        "those features the candidate reply has, and answer with a percentage only."
    ),
    "judge_user": (
        "{pxy_text}\n\n```Reference reply: {reference}```\n\n```Candidate reply: {candidate}```\n\n {instruction}"
        "\n\n Share: "
    ),
}

RELEASED: dict[str, Released] = {
    "policy_system": Released(_AUTHORS + "test_generation/policy_test.py", "specified_sys_prompt"),
    "policy_user": Released(_AUTHORS + "test_generation/policy_test.py", "prompt", occurrence=1),
    "policy_user_naive": Released(_AUTHORS + "test_generation/policy_test.py", "prompt", occurrence=0),
    "thought_system": Released(_AUTHORS + "templates.py", "system_prompt_for_SThought"),
    "thought_user": Released(_AUTHORS + "templates.py", "base_prompt_for_SThought"),
    "no_reference": Released(_AUTHORS + "REMID_estimation/REMID_thought_collection.py", "agent_golden_response"),
    "pxy_system": Released(_AUTHORS + "templates.py", "system_prompt_for_model_pxy"),
    "pxy_user": Released(_AUTHORS + "templates.py", "base_prompt_for_model_pxy"),
    "features_block": Released(
        _AUTHORS + "REMID_estimation/REMID_estimation.py",
        "SFT_input",
        occurrence=1,
        rename={"SFT_input": "input", "EMI_Inference_SThought": "features"},
    ),
    "response_target": Released(
        _AUTHORS + "REMID_estimation/REMID_estimation.py", "y_golden_message", rename={"golden_response": "response"}
    ),
    "judge_system": Released(_AUTHORS + "estimator_training/CoEvolve_RL.py", "system_prompt_for_PxyReward"),
    "judge_instruction": Released(_AUTHORS + "estimator_training/CoEvolve_RL.py", "instruction"),
    "judge_user": Released(
        _AUTHORS + "estimator_training/CoEvolve_RL.py",
        "prompt_for_model_PxyReward",
        rename={
            "prompt_for_model_pxy": "pxy_text",
            "expected_output_for_model_pxy": "reference",
            "content": "candidate",
        },
    ),
}

_FENCE = re.compile(r"```\s*\n?(.*?)```", re.DOTALL)
_HEADER = re.compile(r"^#{3,4}\s+(.+?)\s*$", re.MULTILINE)


def format_dialogue(context: Sequence[Turn]) -> str:
    """Numbered ``User Query k: ...`` / ``Agent Response k: ...`` blocks, ending with an open ``Agent Response n:``
    for the final user query (the authors' dialogue layout)."""
    if not context or context[-1].role != "user" or any(t.role not in ("user", "assistant") for t in context):
        raise ValueError("a dialogue context is user/assistant turns ending on a user turn")
    if any(t.role != ("user" if k % 2 == 0 else "assistant") for k, t in enumerate(context)):
        raise ValueError("a dialogue context alternates user and assistant turns, starting with the user")
    blocks = []
    for number, start in enumerate(range(0, len(context), 2), start=1):
        query = context[start].content
        if start + 1 < len(context):
            blocks.append(f"User Query {number}: {query}\nAgent Response {number}: {context[start + 1].content}\n")
        else:
            blocks.append(f"User Query {number}: {query}\n")
            last = number
    return "\n".join([*blocks, f"Agent Response {last}: "])


@dataclass(frozen=True)
class RolePlayInput:
    """The input x of an RPGBench sample as the prompts show it."""

    user_persona: str
    agent_character: str
    str_dialogue_context: str

    @classmethod
    def of(cls, persona: Any, character: Any, context: Sequence[Turn]) -> RolePlayInput:
        return cls(str(persona), str(character), format_dialogue(context))

    def slots(self) -> dict[str, str]:
        return {
            "user_persona": self.user_persona,
            "agent_character": self.agent_character,
            "str_dialogue_context": self.str_dialogue_context,
        }


@dataclass(frozen=True)
class RemidPrompts:
    """The resolved templates of one run (module docstring)."""

    templates: Mapping[str, Template]

    def __getitem__(self, name: str) -> Template:
        return self.templates[name]

    def records(self) -> dict[str, dict[str, str]]:
        """name -> {origin, sha256}: what metrics.json records."""
        return {name: t.record() for name, t in self.templates.items()}

    @property
    def marker(self) -> str:
        """The core-features marker: the first line of the thought template's last fenced block."""
        blocks = _FENCE.findall(self["thought_user"].text)
        lines = [line.strip() for line in (blocks[-1] if blocks else "").splitlines() if line.strip()]
        if not lines:
            raise TemplateError(f"thought template ({self['thought_user'].origin}) has no fenced core-features block")
        return lines[0]

    @property
    def sections(self) -> tuple[str, ...]:
        """The thought layout's level-3/4 headers outside fenced blocks, numbered attempts aside."""
        outside = _FENCE.sub("", self["thought_user"].text.split("{agent_golden_response}")[-1])
        return tuple(h for h in _HEADER.findall(outside) if not re.search(r"\d$", h))

    @property
    def response_header(self) -> str:
        return self["response_target"].text.split("{response}")[0].strip()

    # Prompts as chat turns

    def policy(self, x: RolePlayInput, naive: bool = False) -> tuple[Turn, Turn]:
        user = self["policy_user_naive" if naive else "policy_user"].render(**x.slots())
        return Turn("system", self["policy_system"].render()), Turn("user", user)

    def thought(self, x: RolePlayInput) -> list[Turn]:
        """The reasoning generator's prompt: x without the golden response (r depends on x alone)."""
        user = self["thought_user"].render(**x.slots(), agent_golden_response=self["no_reference"].render())
        return [Turn("system", self["thought_system"].render()), Turn("user", user)]

    def core_features(self, thought: str) -> str:
        """The text after the last marker, fences removed (the whole text when there is no marker)."""
        return thought.split(self.marker)[-1].replace("```", "")

    def pxy_text(self, x: RolePlayInput, features: str | None) -> str:
        """The critic's user message: x, then the features block when ``features`` is given (plain EMI: none)."""
        text = self["pxy_user"].render(**x.slots())
        return text if features is None else self["features_block"].render(input=text, features=features)

    def pxy(self, x: RolePlayInput, features: str | None) -> list[Turn]:
        return [Turn("system", self["pxy_system"].render()), Turn("user", self.pxy_text(x, features))]

    def target(self, response: str) -> str:
        return self["response_target"].render(response=response)

    def judge(self, x: RolePlayInput, features: str, golden: str, candidate: str) -> list[Turn]:
        """The dialogue-reward judge's prompt comparing ``candidate`` with the golden target."""
        text = self["judge_user"].render(
            pxy_text=self.pxy_text(x, features),
            reference=self.target(golden),
            candidate=candidate,
            instruction=self["judge_instruction"].render(),
        )
        return [Turn("system", self["judge_system"].render()), Turn("user", text)]


@lru_cache(maxsize=8)
def remid_prompts(source: str | Path | None = None) -> RemidPrompts:
    """rpbench's wording, or with ``source`` (a DAMO-ConvAI clone) the authors' templates from their files;
    resolved once per source (the RPGBench reader asks for them per record)."""
    templates = {name: resolve(name, text, RELEASED.get(name), source) for name, text in DEFAULTS.items()}
    prompts = RemidPrompts(templates)
    for name in ("policy_user", "policy_user_naive", "pxy_user"):
        if set(templates[name].slots) != _INPUTS:
            raise TemplateError(f"template {name} ({templates[name].origin}) must have the slots {sorted(_INPUTS)}")
    if len(prompts.sections) < 2 or not prompts.marker:
        raise TemplateError(f"thought template ({templates['thought_user'].origin}) has no section headers")
    return prompts
