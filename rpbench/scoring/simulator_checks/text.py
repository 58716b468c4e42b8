"""Word-level measures of user turns: words, word-set overlap, the longest run of words two texts share, and
the lines where a turn speaks as the character (its speaker tag, or a claim of its name)."""

from __future__ import annotations

import re
from collections.abc import Sequence

WORD = re.compile(r"[\w']+")


def words(text: str) -> list[str]:
    """The text's words, lower-cased (letters, digits and apostrophes; ``’`` read as ``'``)."""
    return WORD.findall(text.lower().replace("\u2019", "'"))


def jaccard(a: str, b: str) -> float:
    """|A ∩ B| / |A ∪ B| of the two texts' word sets (0 when both have no word)."""
    x, y = set(words(a)), set(words(b))
    return len(x & y) / len(x | y) if x | y else 0.0


def longest_shared_run(a: Sequence[str], b: Sequence[str]) -> int:
    """The length of the longest run of consecutive words that ``a`` and ``b`` share (dynamic programming)."""
    best, previous = 0, [0] * (len(b) + 1)
    for word in a:
        current = [0] * (len(b) + 1)
        for j, other in enumerate(b, start=1):
            if word == other:
                current[j] = previous[j - 1] + 1
                best = max(best, current[j])
        previous = current
    return best


def names_of(character: str) -> list[str]:
    """What the character is called: its full name and, for a name of several words, its first word."""
    parts = character.split()
    return [character.strip(), *(parts[:1] if len(parts) > 1 else [])]


def speaker_tag(text: str, names: Sequence[str]) -> bool:
    """A line of ``text`` starts with one of ``names`` and a colon (``Mara Voss: ...``): a turn written for them."""
    pattern = re.compile(rf"^\s*(?:{'|'.join(re.escape(n) for n in names)})\s*:", re.IGNORECASE | re.MULTILINE)
    return bool(pattern.search(text))


def claims_name(text: str, names: Sequence[str]) -> bool:
    """``text`` says it is one of ``names`` in the first person: ``I am|I'm|my name is|call me <name>`` (not
    followed by a possessive ``'s``)."""
    alternatives = "|".join(re.escape(n) for n in names)
    pattern = rf"\b(?:i am|i'm|my name is|call me)\s+(?:{alternatives})\b(?!')"
    return bool(re.search(pattern, text.lower().replace("\u2019", "'"), re.IGNORECASE))


def embedded_user_cue(text: str, cue: str) -> int:
    """Lines after the first of a user turn that open with the user cue (``User:``): further user turns
    written into one."""
    return sum(line.lstrip().startswith(cue) for line in text.splitlines()[1:])
