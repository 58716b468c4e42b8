"""Step 4: dialogues in the categories and proportions of the paper's Table 2, as RoleMRC records.

Categories (labels as the released data names them, ``rpbench.data.rolemrc``):

- free_chat, on_scene_chat: multi-turn chats, user or role first, with or without narration (SFT only);
  on-scene chats discuss the profile's most relevant passages.
- answer / no_answer (most relevant triplet answerable / not), refusal / attempt (least relevant, answerable):
  one user question on the passages; the generator restyles a plain seed reply in the role's voice.
- multi_turn: no_answer (``-2ndrefused``) or refusal (``-2ndanswer``) with a user push for an answer;
  nested: answer under a content or format rule; prioritized: answer under a system ban (``-refused``).

The MRC categories give SFT records and pair records whose rejected reply is the plain seed (for prioritized:
the plain answer the ban forbids); a ``test_fraction`` of profiles gives the test split with the 18 labels.
Counts: Table 2's single-label counts for 10.2k profiles, scaled to the profiles at hand. A profile is used at
most once per category; a category short of eligible profiles is reported.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rpbench.data.rolemrc import FREE_CHAT, MULTI_TURN, NESTED, ON_SCENE, PRIORITY
from rpbench.data.templates import Template
from rpbench.scoring.chat import ChatRequest
from rpbench.synth import prompts
from rpbench.synth.calls import Checked, Task
from rpbench.synth.profiles import json_payload, profile_text

NARRATIONS = ("with", "no")
LABELS = {
    "free_chat": FREE_CHAT,
    "on_scene_chat": ON_SCENE,
    "answer": [f"role_related_mrc_answer_{n}_narration" for n in NARRATIONS],
    "no_answer": [f"role_related_mrc_refused_{n}_narration" for n in NARRATIONS],
    "refusal": [f"role_unrelated_mrc_refused_{n}_narration" for n in NARRATIONS],
    "attempt": [f"role_unrelated_mrc_answer_{n}_narration" for n in NARRATIONS],
    "multi_turn": MULTI_TURN,
    "nested": NESTED,
    "prioritized": PRIORITY,
}
CHATS = ("free_chat", "on_scene_chat")
MRC = tuple(c for c in LABELS if c not in CHATS)
SEPARATOR = re.compile(r"^\s*###\s*$", re.MULTILINE)
NESTED_WORDS = ("indeed", "certainly", "splendid")


def needs(label: str) -> tuple[str, bool] | None:
    """Which end of the ranking a label's triplet comes from and whether it must be answerable; None: no triplet."""
    if label.startswith("role_related_dialogue"):
        return None
    if label.startswith("role_related_mrc_dialogue"):
        return ("most", True)
    if label.startswith("role_related_mrc_refused"):
        return ("most", False)
    return ("least", True) if label.startswith("role_unrelated") else ("most", True)


def triplet_for(retrieved: Mapping[str, Any], label: str) -> dict[str, Any] | None:
    need = needs(label)
    if need is None:
        return {}
    end, answerable = need
    if label.startswith("role_related_mrc_dialogue"):
        return retrieved[end][0]
    return next((t for t in retrieved[end] if t["answerable"] == answerable), None)


def category_counts(
    table: Mapping[str, int], paper_profiles: int, profiles: int, categories: Sequence[str]
) -> dict[str, int]:
    """Table 2's counts scaled from the paper's profiles to ``profiles`` (at least one per label of each)."""
    return {c: max(len(LABELS[c]), round(table[c] * profiles / paper_profiles)) for c in categories}


@dataclass(frozen=True)
class Planned:
    id: str
    split: str
    category: str
    label: str
    profile_id: str


def plan(
    profiles: Sequence[dict[str, Any]],
    retrieved: Mapping[str, Mapping[str, Any]],
    counts: Mapping[str, int],
    split: str,
    seed: int,
) -> tuple[list[Planned], dict[str, int]]:
    """The items of a split and, per category, how many it fell short for want of eligible profiles."""
    items, short = [], {}
    for category, count in counts.items():
        order = sorted(p["id"] for p in profiles)
        random.Random(f"{seed}:{split}:{category}").shuffle(order)
        used: set[str] = set()
        labels = LABELS[category]
        eligible = {label: iter([p for p in order if triplet_for(retrieved[p], label) is not None]) for label in labels}
        for slot in range(count):
            label = labels[slot % len(labels)]
            pid = next((p for p in eligible[label] if p not in used), None)
            if pid is None:
                short[category] = short.get(category, 0) + 1
                continue
            used.add(pid)
            items.append(Planned(f"{split}:{label}:{pid}", split, category, label, pid))
    return items, short


# ------------------------------------------------------------------------------------------------ requests


def _turn(role: str, content: str) -> dict[str, str]:
    return {"role": role, "content": content}


def _passages(triplet: Mapping[str, Any]) -> str:
    return "\n".join(f"[{i}] {text}" for i, text in enumerate(triplet["passages"], 1))


def _narration_rule(narration: bool, single: bool) -> str:
    if not narration:
        return prompts.NARRATION_OFF
    return prompts.NARRATION_ON_SINGLE if single else prompts.NARRATION_ON + " "


class Builder:
    """Builds each planned item's generator task (and, from the reply, its records)."""

    def __init__(self, templates: Mapping[str, Template], max_tokens: Mapping[str, int], exchanges: int, seed: int):
        self.templates, self.max_tokens, self.exchanges, self.seed = templates, max_tokens, exchanges, seed

    def task(self, item: Planned, profile: Mapping[str, Any], retrieved: Mapping[str, Any]) -> Task:
        narration = "with_narration" in item.label
        rng = random.Random(f"{self.seed}:{item.id}")
        triplet = triplet_for(retrieved, item.label)
        sheet = profile_text(profile, narration)
        meta = {"split": item.split, "category": item.category, "task": item.label, "profile_id": item.profile_id}
        if item.category in CHATS:
            return self._chat_task(item, profile, sheet, narration, triplet, meta)
        return self._reply_task(item, profile, sheet, narration, triplet, rng, meta)

    def _system(self, profile: Mapping[str, Any], sheet: str, rule: str | None) -> str:
        text = prompts.SYSTEM.format(name=profile["name"], profile=sheet)
        return f"{text}\n\n{rule}" if rule else text

    def _chat_task(self, item, profile, sheet, narration, triplet, meta) -> Task:
        role_first = "---role_first---" in item.label
        first = "The character speaks first." if role_first else "The user speaks first."
        scene = ""
        system = self._system(profile, sheet, None)
        if item.category == "on_scene_chat":
            scene = f"They talk about these passages, which the user has shared:\n{_passages(triplet)}\n"
            system += f"\n\nThe user has shared these passages with you:\n{_passages(triplet)}"
        text = self.templates["chat"].render(
            profile=sheet,
            exchanges=self.exchanges,
            first_speaker=first,
            scene=scene,
            narration=_narration_rule(narration, single=False),
        )
        request = ChatRequest(
            ({"role": "user", "content": text},), self.max_tokens["chat"], _version(self.templates["chat"])
        )

        def check(reply: str) -> Checked:
            turns = check_chat(reply, role_first, narration)
            if isinstance(turns, str):
                return Checked(reason=turns)
            return Checked(value={"sft": {"task": item.label, "conversations": [_turn("system", system), *turns]}})

        return Task(item.id, request, check, meta)

    def _reply_task(self, item, profile, sheet, narration, triplet, rng, meta) -> Task:
        label, category = item.label, item.category
        question = prompts.MRC_QUESTION.format(passages=_passages(triplet), question=triplet["query"])
        answer = triplet["answers"][0] if triplet["answers"] else ""
        rule, rule_check = None, None
        instruction = prompts.INSTRUCTIONS[category]
        turns = [_turn("user", question)]
        if category == "answer":
            seeds = [answer]
        elif category in ("no_answer", "refusal"):
            seeds = [rng.choice(prompts.SEEDS[category])]
        elif category == "attempt":
            turns = [_turn("user", f"{question}\n\n{rng.choice(prompts.ATTEMPT_PLEA)}")]
            seeds = [rng.choice(prompts.SEEDS["attempt"]).format(answer=answer)]
        elif category == "nested":
            rule, rule_check = _nested_rule(label.rsplit("-", 1)[1], rng)
            instruction = instruction.format(rule=rule)
            seeds = [answer]
        elif category == "prioritized":
            rule = prompts.PRIORITIZED_RULE
            seeds = [rng.choice(prompts.SEEDS["prioritized_refusal"])]
        else:  # multi_turn
            first = "no_answer" if label.endswith("-2ndrefused") else "refusal"
            second = (
                rng.choice(prompts.SEEDS["second_refusal"])
                if first == "no_answer"
                else rng.choice(prompts.SEEDS["attempt"]).format(answer=answer)
            )
            seeds = [rng.choice(prompts.SEEDS[first]), second]
            turns.append(_turn("user", rng.choice(prompts.PUSH)))
        system = self._system(profile, sheet, rule)
        context = "\n".join(f"{t['role'].capitalize()}: {t['content']}" for t in turns)
        if rule:
            context = f"System rule: {rule}\n{context}"
        text = self.templates["reply"].render(
            profile=sheet,
            context=context,
            instruction=instruction,
            seed="\n###\n".join(seeds),
            narration=_narration_rule(narration, single=True),
        )
        request = ChatRequest(
            ({"role": "user", "content": text},),
            self.max_tokens["reply"] * len(seeds),
            _version(self.templates["reply"]),
        )
        rejected = answer if category == "prioritized" else seeds[-1]

        def check(reply: str) -> Checked:
            parts = check_replies(reply, seeds, narration, rule_check)
            if isinstance(parts, str):
                return Checked(reason=parts)
            prompt = [_turn("system", system), turns[0]]
            if len(parts) == 2:
                prompt += [_turn("assistant", parts[0]), turns[1]]
            chosen = parts[-1]
            return Checked(
                value={
                    "sft": {"task": label, "conversations": [*prompt, _turn("assistant", chosen)]},
                    "pair": {"task": label, "prompt": prompt, "chosen": chosen, "rejected": rejected},
                    "test": {"task": label, "question": prompt, "reference": chosen},
                }
            )

        return Task(item.id, request, check, meta)


def _version(template: Template) -> str:
    return f"{template.name}:{template.sha256[:16]}"


def _nested_rule(kind: str, rng: random.Random):
    text, check = rng.choice(prompts.NESTED_RULES[kind])
    if check == "words":
        n = rng.choice((40, 50, 60))
        return text.format(n=n), lambda r: len(r.split()) < n
    if check == "word":
        word = rng.choice(NESTED_WORDS)
        return text.format(word=word), lambda r: word in r.lower()
    if check == "capitals":
        return text, lambda r: r == r.upper() and any(c.isalpha() for c in r)
    return text, lambda r: r.rstrip().endswith("!")


# ------------------------------------------------------------------------------------------------ checks


def has_narration(text: str) -> bool:
    return text.lstrip().startswith("(") and ")" in text


def check_chat(reply: str, role_first: bool, narration: bool) -> list[dict[str, str]] | str:
    """The chat's turns as RoleMRC turns, or the reason it is rejected."""
    try:
        data = json_payload(reply)
    except ValueError as error:
        return f"not_json: {error}"
    if not isinstance(data, list) or not data:
        return "not_a_turn_list: expected a non-empty JSON list of turns"
    turns = []
    for i, turn in enumerate(data):
        if not isinstance(turn, dict) or turn.get("speaker") not in ("user", "role"):
            return f"bad_turn: turn {i} needs speaker 'user' or 'role'"
        text = turn.get("text")
        if not isinstance(text, str) or not text.strip():
            return f"bad_turn: turn {i} has no text"
        turns.append(_turn("assistant" if turn["speaker"] == "role" else "user", text.strip()))
    if turns[0]["role"] != ("assistant" if role_first else "user"):
        return f"wrong_first_speaker: expected the {'role' if role_first else 'user'} first"
    if any(a["role"] == b["role"] for a, b in zip(turns, turns[1:])):
        return "not_alternating: two turns in a row by the same speaker"
    if turns[-1]["role"] != "assistant":
        turns = turns[:-1]  # a chat ends on the role's reply: a trailing user turn is cut
    role_turns = [t["content"] for t in turns if t["role"] == "assistant"]
    if len(role_turns) < 2:
        return "too_short: fewer than two replies of the role"
    if not narration and any(has_narration(t) for t in role_turns):
        return "narration_present: a reply has narration in a narration-free dialogue"
    if narration and not any(has_narration(t) for t in role_turns):
        return "narration_missing: no reply has narration"
    return turns


def check_replies(reply: str, seeds: Sequence[str], narration: bool, rule_check) -> list[str] | str:
    """The restyled replies (one per seed), or the reason they are rejected."""
    parts = [p.strip() for p in SEPARATOR.split(reply)] if len(seeds) > 1 else [reply.strip()]
    if len(parts) != len(seeds) or not all(parts):
        return f"wrong_part_count: expected {len(seeds)} non-empty replies separated by ###, got {len(parts)}"
    for part, seed in zip(parts, seeds):
        if part.startswith(("{", "[")):
            return "not_plain_text: a reply that looks like JSON"
        if " ".join(part.split()) == " ".join(seed.split()):
            return "unstyled: the reply repeats the plain seed"
        if narration and not has_narration(part):
            return "narration_missing: the reply does not begin with narration"
        if not narration and has_narration(part):
            return "narration_present: narration in a narration-free reply"
    if rule_check is not None and not rule_check(parts[-1]):
        return "rule_not_followed: the reply breaks the nested rule"
    return parts
