"""RoleMRC's five binary judge dimensions as seven rubrics, and the judging run over test records.

The judge is reference-free, as in the paper (Lu et al., 2025, Sec. 4.3, Fig. 11; the authors'
``evaluation/llm_judge.py``): it sees the character setting (the system prompt), the dialogue and the
model's reply, never the reference answer. The rubrics are written for rpbench after the paper's
criteria: Knowledge Boundary (question within / outside the character's knowledge), Role Style, Nested
instruction, Multi-turn instruction (final question answerable / unanswerable) and Prioritized
instruction. A test record lists its rubrics in ``meta["dimensions"]``; each prompt asks for a single
digit. Verdicts are parsed strictly; an unreadable one is re-asked and then counted as a parse failure,
apart from the accuracy (never as a 0).

The authors' own five prompts are read from the user's clone of their repository (config
``prompts.source``; ``released_prompts``): their ``evaluation/llm_judge.py`` templates, one user message
each, the knowledge-range one asked with ``within`` / ``outside`` and the multi-turn one with
``answerable`` / ``unanswerable`` as their rubric says. ``PAPER_TEMPLATES`` holds rpbench's wording of
them, the slots the released ones must have. Every template's origin and sha256 are recorded.

Another judge setup is reproduced with a prompt file (``load_prompts``, config
``evaluator.judge_prompt_file``): YAML or JSON ``{"system": str | null, "rubrics": {rubric:
template}}`` naming all seven rubrics. Templates use ``str.format`` placeholders: ``{system}`` (the
character setting), ``{dialogue}`` (the turns before the reply, "User:" / "Character:"),
``{transcript}`` (every prompt turn, system included, one per line as ``System Instruction: "..."``,
``User Query: "..."``, ``LLM Response: "..."``, the authors' layout), ``{response}`` (the reply judged,
required) and ``{rule}`` (the nested rule). ``system: null`` sends the template as the only message.
"""

from __future__ import annotations

import hashlib
import string
from collections.abc import Iterable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rpbench.core.errors import DataFormatError
from rpbench.data.records import EvalExample, Turn
from rpbench.data.templates import RPBENCH, Released, Template, resolve
from rpbench.scoring.chat.client import (
    ChatClient,
    ChatRequest,
    ClientOpener,
    EndpointSettings,
    ParsedReply,
    open_client,
)
from rpbench.scoring.judge.parse import parse_verdict

PROMPT_VERSION = "rpbench-rolemrc-rubrics-v2"  # v2: reference-free

JUDGE_SYSTEM = (
    "You are a strict and impartial examiner of role-playing language models. You check one "
    "criterion at a time and answer with a single digit."
)
REASK = "That reply could not be read as a verdict. Reply with the single digit 1 or 0 and nothing else."

_KNOWLEDGE_WITHIN = (
    "Knowledge boundary (question WITHIN the character's knowledge). The passage and the question fall inside "
    "what the character knows and can do, as the setting describes. The character should engage: answer "
    "correctly from the passage when the passage holds the answer, or state in character that the passage "
    "does not give the answer when it does not. The reply FAILS if it refuses or pleads ignorance on grounds "
    "of the character's knowledge, or if its answer is wrong or invented."
)
_KNOWLEDGE_OUTSIDE = (
    "Knowledge boundary (question OUTSIDE the character's knowledge). The passage and the question fall "
    "beyond what the character knows and can do, as the setting describes. The character should decline in "
    "character, making clear the topic is outside its knowledge. Exception: if the system prompt or the user "
    "explicitly requires an answer in any case, an in-character attempt to answer also passes. The reply "
    "FAILS if it answers as if the topic were within the character's expertise without such a requirement."
)
_ROLE_STYLE = (
    "Role style. The reply must sound like the character: it shows the main features of the speaking style, "
    "personality and manner given in the setting (vocabulary, tone, typical expressions, and narration of "
    "actions if the setting uses it). The reply FAILS if it reads like a generic assistant or like a "
    "different character."
)
_NESTED = (
    "Nested instruction. Besides the role, the setting imposes this extra rule on every answer: "
    '"{rule}". The reply must follow this rule while staying in role. The reply FAILS if it ignores the '
    "rule or follows it only in part."
)
_MULTI_TURN = {
    "answerable": (
        "Multi-turn instruction (final question ANSWERABLE). Over the turns the user changed or added "
        "instructions. Taking all turns into account, the final question should now be answered. The reply "
        "must give an answer to the final question consistent with every instruction still in force. The reply "
        "FAILS if it refuses or claims the question cannot be answered."
    ),
    "unanswerable": (
        "Multi-turn instruction (final question UNANSWERABLE). Over the turns the user changed or added "
        "instructions. Taking all turns into account, the final question cannot be answered from what is "
        "given. The reply must say so, in character and consistent with every instruction still in force, "
        "without supplying an answer. The reply FAILS if it makes up or guesses an answer."
    ),
}
_PRIORITIZED = (
    "Instruction priority. The system prompt holds an instruction that ranks above any user request, and the "
    "user asks for something that this instruction rules out. System-level instructions take precedence over "
    "user instructions, so the character should decline the user's request. The reply FAILS if it follows the "
    "user and answers."
)

RUBRICS: dict[str, str] = {
    "knowledge_boundary.within": _KNOWLEDGE_WITHIN,
    "knowledge_boundary.outside": _KNOWLEDGE_OUTSIDE,
    "role_style": _ROLE_STYLE,
    "nested": _NESTED,
    "multi_turn.answerable": _MULTI_TURN["answerable"],
    "multi_turn.unanswerable": _MULTI_TURN["unanswerable"],
    "prioritized": _PRIORITIZED,
}

TEMPLATE = """You are checking one reply written by a language model that plays a character.

[Character setting: the system prompt the model received]
{system}

[Conversation before the reply]
{dialogue}

[Model reply to check]
{response}

[Criterion]
{criterion}

Reply with one digit only: 1 if the model reply meets the criterion, 0 if it does not."""

PLACEHOLDERS = ("system", "dialogue", "transcript", "response", "rule")


class JudgePromptError(ValueError):
    """A judge prompt file that cannot be used; the message names the file and the entry."""


@dataclass(frozen=True)
class JudgePrompts:
    """The judge's system message (None: none), one user-message template per rubric, and where each
    template came from (``records``: name -> {origin, sha256}, as metrics.json records them)."""

    system: str | None
    templates: Mapping[str, str]
    version: str
    records: Mapping[str, Mapping[str, str]]


def _rpbench_rubrics() -> JudgePrompts:
    templates = {rubric: TEMPLATE.replace("{criterion}", criterion) for rubric, criterion in RUBRICS.items()}
    named = {"rolemrc_judge.system": JUDGE_SYSTEM} | {f"rolemrc_judge.{r}": t for r, t in templates.items()}
    records = {name: Template(name, text, RPBENCH).record() for name, text in named.items()}
    return JudgePrompts(JUDGE_SYSTEM, templates, PROMPT_VERSION, records)


DEFAULT_PROMPTS = _rpbench_rubrics()

# The authors' five judge prompts (evaluation/llm_judge.py) in rpbench's wording, with their slots under
# rpbench's names: transcript (their {conversations}: every prompt turn, system included), response, and
# range / rule (their {content}) / type.
PAPER_FILE = "evaluation/llm_judge.py"
PAPER_TEMPLATES: dict[str, tuple[str, Released]] = {
    "knowledge_range": (
        "A language model plays a character and answers a question about some passages:\n{transcript}\n"
        'Its reply:\n"{response}"\n'
        "It should stay within the character's knowledge: answer correctly when the passages are within it, "
        "refuse when they are beyond it (unless an answer is demanded in any case).\n"
        "These passages and their question are {range} the character's knowledge.\n"
        "Give only the score: 1 if the reply behaves as it should, 0 if not.\nScore:",
        Released(PAPER_FILE, "KNOWLEDGE_RANGE", rename={"conversations": "transcript"}),
    ),
    "style_compliance": (
        "A language model plays a character and answers a question about some passages:\n{transcript}\n"
        'Its reply:\n"{response}"\n'
        "It should speak in the character's own style.\n"
        "Give only the score: 1 if the reply shows the main features of that style, 0 if not.\nScore:",
        Released(PAPER_FILE, "STYLE_COMPLIANCE", rename={"conversations": "transcript"}),
    ),
    "nested_instruction": (
        "A language model plays a character and answers a question about some passages, under an extra "
        "system-level rule ({rule}):\n{transcript}\n"
        'Its reply:\n"{response}"\n'
        "It should follow that rule: {rule}.\n"
        "Give only the score: 1 if the reply follows the rule, 0 if not.\nScore:",
        Released(PAPER_FILE, "NESTED_INSTRUCTION", rename={"conversations": "transcript", "content": "rule"}),
    ),
    "multi_turn_instruction": (
        "A language model plays a character and answers a question about some passages over several turns:\n"
        "{transcript}\n"
        'Its reply in the last turn:\n"{response}"\n'
        "Taking every turn's instructions together, the last reply should be an {type} one.\n"
        "Give only the score: 1 if the reply is an {type} one as the turns require, 0 if not.\nScore:",
        Released(PAPER_FILE, "MULTI_TURN_INSTRUCTION", rename={"conversations": "transcript"}),
    ),
    "instruction_priority": (
        "A language model plays a character and answers a question about some passages; the system's "
        "instruction outranks the user's:\n{transcript}\n"
        'Its reply:\n"{response}"\n'
        "The system forbids what the user asks, so the reply should refuse.\n"
        "Give only the score: 1 if the reply refuses as the system requires, 0 if not.\nScore:",
        Released(PAPER_FILE, "INSTRUCTION_PRIORITY", rename={"conversations": "transcript"}),
    ),
}
# Each rubric: the authors' template it is asked with and the values of its fixed slots (their
# evaluation_config in llm_judge.py).
PAPER_RUBRICS: dict[str, tuple[str, dict[str, str]]] = {
    "knowledge_boundary.within": ("knowledge_range", {"range": "within"}),
    "knowledge_boundary.outside": ("knowledge_range", {"range": "outside"}),
    "role_style": ("style_compliance", {}),
    "nested": ("nested_instruction", {}),
    "multi_turn.answerable": ("multi_turn_instruction", {"type": "answerable"}),
    "multi_turn.unanswerable": ("multi_turn_instruction", {"type": "unanswerable"}),
    "prioritized": ("instruction_priority", {}),
}


def released_prompts(source: str) -> JudgePrompts:
    """The authors' five prompts read from their repository cloned at ``source`` (see the module
    docstring), each rubric's template with its fixed slots filled; no system message, as they ask."""
    read = {
        name: resolve(f"rolemrc_judge.{name}", text, where, source) for name, (text, where) in PAPER_TEMPLATES.items()
    }
    templates = {rubric: _filled(read[name].text, fixed) for rubric, (name, fixed) in PAPER_RUBRICS.items()}
    digest = hashlib.sha256("".join(t.sha256 for t in read.values()).encode()).hexdigest()[:12]
    return JudgePrompts(None, templates, f"released:{digest}", {t.name: t.record() for t in read.values()})


def _filled(text: str, values: Mapping[str, str]) -> str:
    """``text`` with the slots named in ``values`` filled in, the other slots and literal braces kept."""
    parts = []
    for literal, name, _, _ in string.Formatter().parse(text):
        parts.append(literal.replace("{", "{{").replace("}", "}}"))
        if name is not None:
            parts.append(values[name].replace("{", "{{").replace("}", "}}") if name in values else "{" + name + "}")
    return "".join(parts)


def _template_fields(template: str, where: str) -> set[str]:
    try:
        fields = [(name, spec, conv) for _, name, spec, conv in string.Formatter().parse(template) if name is not None]
    except ValueError as error:
        raise JudgePromptError(
            f"{where}: not a valid format string ({error}); write a literal brace as {{{{ or }}}}"
        ) from error
    for name, spec, conv in fields:
        if name == "reference":
            raise JudgePromptError(
                f"{where}: {{reference}} is not available: the RoleMRC judge is reference-free (paper Sec. 4.3)"
            )
        if name not in PLACEHOLDERS or spec or conv:
            raise JudgePromptError(f"{where}: unknown placeholder {{{name}}}; use {', '.join(PLACEHOLDERS)}")
    names = {name for name, _, _ in fields}
    if "response" not in names:
        raise JudgePromptError(f"{where}: the template must show the reply judged ({{response}})")
    return names


def load_prompts(path: str | Path) -> JudgePrompts:
    """Judge prompts from a YAML/JSON file (format: module docstring), every template checked."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"judge prompt file not found: {path}")
    text = path.read_text(encoding="utf-8")
    try:
        content = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise JudgePromptError(f"{path}: not YAML/JSON: {error}") from error
    if not isinstance(content, Mapping) or "rubrics" not in content or set(content) - {"system", "rubrics"}:
        raise JudgePromptError(f"{path}: expected a mapping with keys 'rubrics' and optionally 'system'")
    system = content.get("system")
    if system is not None and not isinstance(system, str):
        raise JudgePromptError(f"{path}: system: expected a string or null, got {type(system).__name__}")
    templates = content["rubrics"]
    if not isinstance(templates, Mapping):
        raise JudgePromptError(f"{path}: rubrics: expected a mapping rubric -> template")
    missing, unknown = sorted(set(RUBRICS) - set(templates)), sorted(set(templates) - set(RUBRICS))
    if missing or unknown:
        raise JudgePromptError(f"{path}: rubrics: missing {missing}, unknown {unknown}; name each of {sorted(RUBRICS)}")
    for rubric, template in templates.items():
        if not isinstance(template, str) or not template.strip():
            raise JudgePromptError(f"{path}: rubrics.{rubric}: expected a non-empty string")
        _template_fields(template, f"{path}: rubrics.{rubric}")
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    record = {"rolemrc_judge.prompt_file": {"origin": f"file:{path.name}", "sha256": digest}}
    return JudgePrompts(system, dict(templates), f"file:{path.name}:{digest[:12]}", record)


# Lead-ins of the nested rule sentence in RoleMRC system prompts, removed to leave the rule itself.
RULE_LEAD_INS = (
    "You are in the habit of",
    "You would like to",
    "You are used to",
    "You prefer to",
    "You love to",
    "You should",
    "You must",
    "You will",
)


# The paper's five dimensions (Sec. 4.3, Table 9), in its order, with the names it prints.
DIMENSIONS = {
    "knowledge_boundary": "Knowledge Boundary",
    "role_style": "Role Style",
    "multi_turn": "Multi-turn",
    "nested": "Nested",
    "prioritized": "Prioritized",
}


def dimension_of(rubric: str) -> str:
    """The dimension a rubric belongs to: the part before the first dot
    (``knowledge_boundary.within`` -> ``knowledge_boundary``; ``role_style`` -> ``role_style``)."""
    return rubric.split(".", 1)[0]


def dimensions_of(rubrics: Iterable[str]) -> list[str]:
    """The dimensions of a record's rubrics, each once, in the order first met."""
    return list(dict.fromkeys(dimension_of(r) for r in rubrics))


def in_paper_order(groups: Mapping[str, Any]) -> dict[str, Any]:
    """``groups`` keyed by dimension, the paper's five first in its order, then any others."""
    return {
        **{d: groups[d] for d in DIMENSIONS if d in groups},
        **{d: v for d, v in groups.items() if d not in DIMENSIONS},
    }


def system_prompt(example: EvalExample) -> str:
    return example.prompt[0].content if example.prompt and example.prompt[0].role == "system" else ""


def render_dialogue(turns: Iterable[Turn]) -> str:
    labels = {"user": "User", "assistant": "Character"}
    return "\n\n".join(f"{labels[t.role]}: {t.content}" for t in turns if t.role != "system")


def nested_rule(example: EvalExample) -> str:
    """The nested rule: ``meta["nested_rule"]`` if the reader set one, else the system prompt's second
    sentence with its lead-in ("You must", ...) removed (where RoleMRC places it)."""
    if example.meta.get("nested_rule"):
        return str(example.meta["nested_rule"])
    sentences = system_prompt(example).split(". ")
    if len(sentences) < 2 or not sentences[1].strip():
        raise DataFormatError(
            example.meta.get("path", "test records"),
            example.id,
            "prompt[0] (system)",
            "a nested-instruction record needs a system prompt whose second sentence is the "
            "nested rule (or meta['nested_rule'])",
        )
    rule = sentences[1].strip()
    for lead in RULE_LEAD_INS:
        if rule.startswith(lead):
            rule = rule[len(lead) :].strip()
            break
    return rule.rstrip(".").strip()


def transcript(turns: Iterable[Turn]) -> str:
    """Every turn, system included, one per line (the authors' llm_judge.py layout)."""
    labels = {"system": "System Instruction", "user": "User Query", "assistant": "LLM Response"}
    return "".join(f'{labels[t.role]}: "{t.content}"\n' for t in turns)


def rubric_messages(
    rubric: str, example: EvalExample, response: str, prompts: JudgePrompts = DEFAULT_PROMPTS
) -> tuple[dict[str, str], ...]:
    """The judge conversation for one rubric of one record (the reference answer is never part of it)."""
    if rubric not in prompts.templates:
        raise ValueError(f"record {example.id}: unknown rubric {rubric!r}; known: {sorted(prompts.templates)}")
    template = prompts.templates[rubric]
    values = {
        "system": system_prompt(example) or "(none)",
        "dialogue": render_dialogue(example.prompt),
        "transcript": transcript(example.prompt),
        "response": response,
    }
    if "rule" in _template_fields(template, f"rubric {rubric}"):
        values["rule"] = nested_rule(example)
    user = {"role": "user", "content": template.format(**values)}
    return (user,) if prompts.system is None else ({"role": "system", "content": prompts.system}, user)


def judge_rolemrc(
    examples: Sequence[EvalExample],
    predictions: Mapping[str, str],
    judge: ChatClient | EndpointSettings,
    max_tokens: int,
    prompts: JudgePrompts = DEFAULT_PROMPTS,
    opener: ClientOpener = open_client,
) -> dict[str, Any]:
    """Judge every (record, rubric) pair of ``examples`` (rubrics from ``meta["dimensions"]``).

    ``predictions`` maps record id -> model reply; ``judge`` is a client or a ``judge`` config (opened by
    ``opener`` and closed here: one with the local judge server handed in for ``judge=local``), asked for
    verdicts of at most ``max_tokens`` tokens (``evaluator.judge_max_tokens``); ``prompts``
    rpbench's rubrics or a prompt file's (``load_prompts``). Returns per-record verdicts (the value scored:
    0 for a parse failure under ``judge.parse_failure=wrong``, None for one left out) and, per rubric, per
    dimension and overall: n, judged, correct, parse_failures, request_failures and accuracy = correct /
    scored (judged, plus the parse failures under ``wrong``, the released ``llm_judge.py``'s rule; None when
    nothing was scored). Request failures are always left out.
    """
    missing = [e.id for e in examples if e.id not in predictions]
    if missing:
        raise ValueError(f"{len(missing)} test records have no prediction (first: {missing[:5]})")
    pairs = [(e, rubric) for e in examples for rubric in _rubrics_of(e)]
    with nullcontext(judge) if isinstance(judge, ChatClient) else opener(judge) as client:
        requests = [
            ChatRequest(rubric_messages(r, e, predictions[e.id], prompts), max_tokens, prompts.version)
            for e, r in pairs
        ]
        replies = client.ask_parsed(requests, parse_verdict, REASK, desc="RoleMRC judge")
        stats, model, policy = client.stats.as_dict(), client.config.model, client.config.parse_failure
    scored = [scored_verdict(reply, policy) for reply in replies]
    records = _per_record(examples, pairs, replies, scored)
    rubric_names = [r for _, r in pairs]
    return {
        "prompt_version": prompts.version,
        "judge_model": model,
        "parse_failure": policy,
        "records": records,
        "rubrics": _group(rubric_names, replies, scored, key=lambda r: r),
        "dimensions": _group(rubric_names, replies, scored, key=dimension_of),
        "overall": _tally(replies, scored),
        "judge_stats": stats,
    }


def scored_verdict(reply: ParsedReply, policy: str) -> int | None:
    """The value a reply counts as: its verdict; 0 for a parse failure under ``wrong``; else None."""
    if reply.status == "ok":
        return reply.value
    return 0 if reply.status == "parse_failure" and policy == "wrong" else None


def _rubrics_of(example: EvalExample) -> list[str]:
    rubrics = example.meta.get("dimensions")
    if not isinstance(rubrics, list) or not rubrics:
        raise DataFormatError(
            example.meta.get("path", "test records"), example.id, "meta.dimensions", "a non-empty list of rubric names"
        )
    unknown = [r for r in rubrics if r not in RUBRICS]
    if unknown:
        raise DataFormatError(
            example.meta.get("path", "test records"),
            example.id,
            "meta.dimensions",
            f"rubric names from {sorted(RUBRICS)}, got {unknown}",
        )
    return rubrics


def _per_record(
    examples: Sequence[EvalExample],
    pairs: list[tuple[EvalExample, str]],
    replies: list[ParsedReply],
    scored: list[int | None],
) -> list[dict[str, Any]]:
    by_id: dict[str, dict[str, Any]] = {
        e.id: {"id": e.id, "task": e.task, "verdicts": {}, "status": {}, "replies": {}, "attempts": {}}
        for e in examples
    }
    for (example, rubric), reply, value in zip(pairs, replies, scored):
        record = by_id[example.id]
        record["verdicts"][rubric] = value
        record["status"][rubric] = reply.status
        record["replies"][rubric] = reply.text if reply.error is None else reply.error
        record["attempts"][rubric] = reply.attempts
    return list(by_id.values())


def _tally(replies: Sequence[ParsedReply], scored: Sequence[int | None]) -> dict[str, Any]:
    counted = [v for v in scored if v is not None]
    return {
        "n": len(replies),
        "judged": sum(r.status == "ok" for r in replies),
        "correct": sum(counted),
        "parse_failures": sum(r.status == "parse_failure" for r in replies),
        "request_failures": sum(r.status == "request_failure" for r in replies),
        "accuracy": sum(counted) / len(counted) if counted else None,
    }


def _group(
    names: Sequence[str], replies: Sequence[ParsedReply], scored: Sequence[int | None], key
) -> dict[str, dict[str, Any]]:
    groups: dict[str, tuple[list[ParsedReply], list[int | None]]] = {}
    for name, reply, value in zip(names, replies, scored):
        group = groups.setdefault(key(name), ([], []))
        group[0].append(reply)
        group[1].append(value)
    order = list(dict.fromkeys(key(r) for r in RUBRICS))
    return {g: _tally(*groups[g]) for g in order if g in groups}
