"""Bundled stand-ins for the external benchmarks RoleMRC is tested on: RoleBench's released layout and
Character-LLM's interview files (trainable-agents). Written for rpbench, nothing copied; the Character-LLM
profiles (``characterllm/data/seed_data/profiles/*.txt``) are static files next to them."""

from __future__ import annotations

from typing import Any

ROLE_DESCRIPTIONS: dict[str, str] = {
    "Captain Ahab": (
        "The obsessed captain of the whaling ship Pequod, who speaks in grand, brooding, biblical tones and "
        "thinks of little but the white whale."
    ),
    "Mary Poppins": (
        "A brisk, prim and magical nanny who is firm but kind, never explains herself and is practically "
        "perfect in every way."
    ),
    "Sherlock Holmes": (
        "A consulting detective of Baker Street who reasons from small observations, speaks precisely and is "
        "impatient with the obvious."
    ),
    "Willy Wonka": (
        "An eccentric chocolate maker who speaks in riddles and rhymes and delights in nonsense and invention."
    ),
}

ROLEBENCH_TESTS: dict[str, list[dict[str, Any]]] = {
    "instruction-generalization/general": [
        {
            "role": "Sherlock Holmes",
            "question": "Give three tips for staying healthy.",
            "generated": [
                "Observe your habits as you would a suspect: eat plainly, walk daily and sleep when the case allows.",
                "Regular exercise, a sober diet and a quiet mind, Watson; the rest is mere detail.",
            ],
        },
        {
            "role": "Mary Poppins",
            "question": "Describe the colour of the sky.",
            "generated": [
                "The sky is a perfectly respectable blue, as it ought to be on a Tuesday.",
                "Blue, of course, and spit-spot, we have no time to stare at it.",
            ],
        },
        {
            "role": "Captain Ahab",
            "question": "Suggest a name for a new boat.",
            "generated": ["Call her Vengeance, for the sea owes me a reckoning."],
        },
    ],
    "instruction-generalization/role_specific": [
        {
            "role": "Sherlock Holmes",
            "question": "How did you know Watson had been in Afghanistan?",
            "generated": ["His tan, his bearing and his injured arm told me all I needed to know."],
        },
        {
            "role": "Captain Ahab",
            "question": "Why do you hunt the white whale?",
            "generated": ["Because he took my leg, and I will have his life for it."],
        },
    ],
    "role-generalization/general": [
        {
            "role": "Willy Wonka",
            "question": "Write a short poem about rain.",
            "generated": [
                "Drip and drop and plip and plop, the sky is making soda pop!",
                "Rain, rain, a sugary stream, falling down like a chocolate dream.",
            ],
        },
        {
            "role": "Mary Poppins",
            "question": "Give advice on tidying a room.",
            "generated": ["Find the fun in the job and snap, the job is a game."],
        },
    ],
    "role-generalization/role_specific": [
        {
            "role": "Willy Wonka",
            "question": "What is inside your factory?",
            "generated": ["Wonders, my dear child: rivers of chocolate and lickable wallpaper."],
        },
    ],
}

INTERVIEWS: dict[str, list[tuple[str, str, str]]] = {
    "generated_agent_interview_Curie": [
        ["topic-1", "personal information and past experiences", "Where did you grow up?"],
        ["topic-3", "values and preferences", "What matters most to you in your work?"],
        ["topic-5", "knowledge beyond the character's time", "What do you think of smartphones?"],
    ],
    "generated_agent_interview_Darwin": [
        ["topic-1", "personal information and past experiences", "What did you see on your long voyage?"],
        ["topic-2", "interpersonal relationships", "Who do you live with?"],
        ["topic-5", "knowledge beyond the character's time", "Have you ever used the internet?"],
    ],
    "generated_agent_interview_for_multiturn_Curie": [
        ["topic-2", "interpersonal relationships", "Your partnership with Pierre in the laboratory."],
    ],
    "generated_agent_interview_for_multiturn_Darwin": [
        ["topic-3", "values and preferences", "How you weigh evidence before publishing an idea."],
        ["topic-1", "personal information and past experiences", "Your daily life at home in Kent."],
    ],
}


def external_records() -> dict[str, Any]:
    """Every generated file of the two stand-ins (relative path -> content)."""
    files: dict[str, Any] = {"rolebench/profiles-eng/desc.json": ROLE_DESCRIPTIONS}
    for where, rows in ROLEBENCH_TESTS.items():
        files[f"rolebench/rolebench-eng/{where}/test.jsonl"] = rows
    for name, rows in INTERVIEWS.items():
        files[f"characterllm/data/seed_data/questions/{name}.json"] = [
            {"topic_id": topic_id, "topic": topic, "question": question} for topic_id, topic, question in rows
        ]
    return files
