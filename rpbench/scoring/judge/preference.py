"""A judge as a scorer of role-play replies (``evaluator=rm_bench``): pointwise (one reply rated 1-10 given the
conversation before it) or pairwise (which of two replies is the better next turn: ``A``, ``B`` or ``tie``).

Both read the conversation as chat messages (a system turn holds the character's profile). A reply not in the
asked form is re-asked (``judge.parse_tries``) and then a parse failure: None, never a guessed score. The pointwise
``JudgeRater.score`` has the reward model's signature (``RewardModelScorer.score``): conversations and replies in,
one number per reply out (None: no verdict).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from rpbench.scoring.chat.client import ChatClient, ChatRequest, ParsedReply

PROMPT_VERSION = "rm-bench-judge-v1"
SPEAKERS = {"system": "Character profile", "user": "User", "assistant": "Character"}
POINTWISE_SYSTEM = (
    "You rate one reply in a role-play conversation. The reply is the character's next turn. Judge how well it "
    "stays in character, follows the story and the user's last message, and keeps the conversation engaging. "
    "Answer with one line, 'Score: N', N an integer from 1 (worst) to 10 (best)."
)
POINTWISE_REASK = "Answer with exactly one line: 'Score: N', N an integer from 1 to 10."
PAIRWISE_SYSTEM = (
    "You compare two replies in a role-play conversation. Each is a candidate for the character's next turn. "
    "Decide which one stays in character better, follows the story and the user's last message better, and "
    "keeps the conversation more engaging. Answer with one line: [[A]], [[B]], or [[tie]] when neither is better."
)
PAIRWISE_REASK = "Answer with exactly one of [[A]], [[B]] or [[tie]]."
SCORE_RANGE = (1, 10)
_SCORE = re.compile(r"^\**score\**\s*[:=]\**\s*\**(\d{1,2})\**\.?$", re.IGNORECASE)
_CHOICE = re.compile(r"\[\[(A|B|tie)\]\]", re.IGNORECASE)


def parse_score(text: str) -> int | None:
    """The N of a reply that is exactly ``Score: N`` (optionally bold), N in 1-10; else None."""
    match = _SCORE.match(text.strip())
    if match is None:
        return None
    value = int(match.group(1))
    return value if SCORE_RANGE[0] <= value <= SCORE_RANGE[1] else None


def parse_choice(text: str) -> str | None:
    """``A``, ``B`` or ``tie`` when the reply names exactly one of ``[[A]]``, ``[[B]]``, ``[[tie]]``; else None."""
    found = {m.upper() if m.lower() != "tie" else "tie" for m in _CHOICE.findall(text)}
    return found.pop() if len(found) == 1 else None


def transcript(conversation: Sequence[Mapping[str, Any]]) -> str:
    return "\n\n".join(f"{SPEAKERS[m['role']]}: {m['content']}" for m in conversation)


def pointwise_request(conversation: Sequence[Mapping[str, Any]], reply: str, max_tokens: int) -> ChatRequest:
    user = f"## Conversation\n{transcript(conversation)}\n\n## Reply to rate\n{reply}\n\nRate the reply."
    messages = ({"role": "system", "content": POINTWISE_SYSTEM}, {"role": "user", "content": user})
    return ChatRequest(messages, max_tokens, f"{PROMPT_VERSION}-pointwise")


def pairwise_request(conversation: Sequence[Mapping[str, Any]], a: str, b: str, max_tokens: int) -> ChatRequest:
    user = (
        f"## Conversation\n{transcript(conversation)}\n\n## Reply A\n{a}\n\n## Reply B\n{b}\n\n"
        "Which reply is the better next turn?"
    )
    messages = ({"role": "system", "content": PAIRWISE_SYSTEM}, {"role": "user", "content": user})
    return ChatRequest(messages, max_tokens, f"{PROMPT_VERSION}-pairwise")


class JudgeRater:
    """A judge rating replies 1-10 through ``client``; ``replies`` keeps every parsed reply of the last call (for
    judgements.jsonl and the tally)."""

    def __init__(self, client: ChatClient, max_tokens: int):
        self.client, self.max_tokens = client, max_tokens
        self.replies: list[ParsedReply] = []

    def score(self, conversations: Sequence[Sequence[Mapping[str, Any]]], replies: Sequence[str]) -> list[float | None]:
        """One rating per reply given the chat messages before it (None: unreadable or unanswered)."""
        requests = [pointwise_request(c, r, self.max_tokens) for c, r in zip(conversations, replies, strict=True)]
        self.replies = self.client.ask_parsed(requests, parse_score, POINTWISE_REASK, desc="judge (rm_bench)")
        return [None if p.value is None else float(p.value) for p in self.replies]


def ask_pairwise(
    client: ChatClient,
    conversations: Sequence[Sequence[Mapping[str, Any]]],
    pairs: Sequence[tuple[str, str]],
    max_tokens: int,
) -> list[ParsedReply]:
    """Each (first, second) pair asked as A and B: the parsed choice (``A``, ``B``, ``tie``) or a failure."""
    requests = [pairwise_request(c, a, b, max_tokens) for c, (a, b) in zip(conversations, pairs, strict=True)]
    return client.ask_parsed(requests, parse_choice, PAIRWISE_REASK, desc="judge (rm_bench, pairwise)")
