"""Inputs for the synthesis tests: a persona file, an MRC pool in MS MARCO's layout whose topics are known, and
a scripted generator that answers each synthesis prompt as a well-behaved model would (or, for personas
marked so, badly)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from scripts.record_synth_sample import generator_reply

TOPICS = {
    "baking": (
        "A pastry chef who bakes sourdough bread and croissants every morning",
        [
            (
                "how long should sourdough bread dough rise",
                "Sourdough dough rises for 4 to 12 hours at room temperature.",
                "4 to 12 hours",
            ),
            (
                "what temperature to bake croissants",
                "Croissants bake in a hot oven at 200 degrees Celsius until golden.",
                "200 degrees Celsius",
            ),
            (
                "why does bread dough need kneading",
                "Kneading bread dough develops gluten, which gives bread its structure.",
                "to develop gluten",
            ),
            ("who invented the croissant oven", "Pastry ovens vary in shape and size across bakeries in France.", None),
        ],
    ),
    "astronomy": (
        "An astronomer who studies distant galaxies with large telescopes",
        [
            (
                "how far is the andromeda galaxy",
                "The Andromeda galaxy is about 2.5 million light years from Earth.",
                "2.5 million light years",
            ),
            (
                "what is a spiral galaxy",
                "A spiral galaxy has arms of stars winding out from a bright central bulge.",
                "a galaxy with spiral arms",
            ),
            (
                "what telescope found the first exoplanet",
                "Telescopes observe galaxies, stars and nebulae across the sky.",
                None,
            ),
            (
                "what is a light year",
                "A light year is the distance light travels in one year.",
                "the distance light travels in a year",
            ),
        ],
    ),
    "football": (
        "A football coach who trains a youth soccer team on weekends",
        [
            ("how long is a soccer match", "A soccer match lasts 90 minutes, two halves of 45 minutes.", "90 minutes"),
            (
                "how many players on a soccer team",
                "Each soccer team fields eleven players including the goalkeeper.",
                "eleven",
            ),
            ("who won the first youth soccer cup", "Youth soccer teams train on weekends in many towns.", None),
            (
                "what is an offside in soccer",
                "A player is offside when nearer the goal line than the ball and the last defender.",
                "being past the last defender",
            ),
        ],
    ),
    "cars": (
        "A car mechanic who repairs engines and brakes in a small garage",
        [
            (
                "how often to change engine oil",
                "Engine oil is usually changed every 5,000 to 10,000 kilometres.",
                "every 5,000 to 10,000 km",
            ),
            ("why do car brakes squeak", "Brakes squeak when the brake pads are worn or glazed.", "worn brake pads"),
            ("who made the first garage tool", "Garages keep wrenches, jacks and engine hoists.", None),
            (
                "what does a car alternator do",
                "The alternator charges the car battery while the engine runs.",
                "charges the battery",
            ),
        ],
    ),
    "gardening": (
        "A gardener who grows roses and tomatoes in a community garden",
        [
            (
                "when to prune roses",
                "Roses are pruned in late winter or early spring before new growth.",
                "late winter or early spring",
            ),
            (
                "how often to water tomato plants",
                "Tomato plants need deep watering two or three times a week.",
                "two or three times a week",
            ),
            (
                "who planted the first community garden",
                "Community gardens grow vegetables and flowers for neighbours.",
                None,
            ),
            (
                "what soil do roses like",
                "Roses like rich, well-drained soil with plenty of organic matter.",
                "rich well-drained soil",
            ),
        ],
    ),
}
MALFORMED = "A persona the generator never describes properly"
FLAKY = "A retired lighthouse keeper who paints seascapes"


def write_personas(path: Path, extra: tuple[str, ...] = ()) -> Path:
    lines = [persona for persona, _ in TOPICS.values()]
    lines += [f"{p}, the second of two" for p in lines]  # a second persona per topic
    path.write_text("\n".join([*lines, "", *extra, lines[0]]) + "\n")  # a blank line and a duplicate
    return path


def write_pool(path: Path) -> tuple[Path, dict[str, list[int]]]:
    """The pool (MS MARCO v2.1 layout) and the pool indices of each topic's records."""
    rows, where = [], {}
    for topic, (_, items) in TOPICS.items():
        for query, passage, answer in items:
            where.setdefault(topic, []).append(len(rows))
            rows.append(
                {
                    "query": query,
                    "query_id": len(rows),
                    "answers": [answer] if answer else ["No Answer Present."],
                    "passages": {"is_selected": [1], "passage_text": [passage], "url": ["http://example.org"]},
                }
            )
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path, where


def scripted(body: dict) -> str:
    """The generator's reply to a synthesis request: the demo's scripted generator
    (scripts/record_synth_sample.py), but badly for the personas marked so."""
    messages = body["messages"]
    persona = re.search(r"Persona: (.*)", messages[0]["content"])
    if messages[0]["content"].startswith("Turn this one-sentence persona") and persona:
        if persona.group(1) == MALFORMED:
            return json.dumps({"name": "Nobody"})  # six components missing, every time
        if persona.group(1) == FLAKY and len(messages) == 1:
            return "Sure! Here is the profile you asked for."  # not JSON; the re-ask is answered properly
    return generator_reply(body)
