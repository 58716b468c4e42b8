"""The bundled conversation scenarios (``data=sample_conversation``), written for rpbench: for a character
of each of the RoleMRC (Mara Voss), MMRole (Bertram Hale) and RPGBench (Greta Holm) samples, two to evaluate
(``scenarios.jsonl``, the test split) and two others to train on (``train-scenarios.jsonl``, env=conversation),
in the ``conversation`` format (rpbench/data/conversation.py). ``scripts.sample_data`` writes them."""

from __future__ import annotations

from typing import Any

CARDS = {
    "Mara Voss": (
        "Mara Voss, a retired sea captain from the harbour town of Saltmere. She knows all about lighthouses, "
        "tides and small boats, but little about anything else, and nothing of modern technology. She is gruff "
        "but kind, patient with newcomers, speaks in short, salty sentences and swears by the tides."
    ),
    "Bertram Hale": (
        "Bertram Hale, the village baker of Lower Wickham. He knows all about windmills, flour and bread, and "
        "little of the world beyond the village. He is warm, cheerful and a little forgetful, speaks gently "
        "and compares everything to baking."
    ),
    "Greta Holm": (
        "Greta Holm, innkeeper of the Lantern Inn in the river town of Amberford, in a fantasy kingdom. She knows "
        "her guests, the river trade and the town's gossip; she has never left the kingdom. She is warm, "
        "talkative and protective of her guests, and her speech is homely and cheerful, full of kitchen sayings."
    ),
}
# id, character, persona, goal, opening, turns
TEST_SCENARIOS = [
    (
        "rolemrc-mara-lighthouse",
        "Mara Voss",
        "Tom, a schoolteacher planning a class trip to the coast; polite and curious.",
        "Learn enough about the old lighthouse to plan a safe visit for twelve pupils.",
        "Good morning, Captain! I hear you know the lighthouse better than anyone.",
        4,
    ),
    (
        "rolemrc-mara-phone",
        "Mara Voss",
        "Lena, a tech-savvy student who keeps testing what people know.",
        "Get the captain to explain how a smartphone's GPS works (she should not know).",
        "Captain, do you use GPS on your phone when you sail?",
        3,
    ),
    (
        "mmrole-bertram-bread",
        "Bertram Hale",
        "Priya, a food blogger who photographs village bakeries.",
        "Get Bertram's favourite bread recipe and the story behind it.",
        "Hello! Your bakery smells wonderful. What is the bread everyone queues for?",
        4,
    ),
    (
        "mmrole-bertram-mill",
        "Bertram Hale",
        "Sam, an engineer restoring old windmills; brisk and technical.",
        "Find out how the Lower Wickham windmill grinds its flour.",
        "Morning. I'm told you know the old windmill. How does it turn the stones?",
        3,
    ),
    (
        "rpgbench-greta-room",
        "Greta Holm",
        "Nadia, a journalist collecting stories for a travel book; sharp and witty.",
        "Get a room for the night and one good story about the inn.",
        "Hi! I don't think we've met before. Do you have a room free tonight?",
        4,
    ),
    (
        "rpgbench-greta-stranger",
        "Greta Holm",
        "A hooded traveller who asks pointed questions about the other guests.",
        "Learn which room the merchant from the south is staying in.",
        "Evening, innkeeper. Is the merchant from the south still lodging here?",
        3,
    ),
]


TRAIN_SCENARIOS = [
    (
        "rolemrc-mara-storm",
        "Mara Voss",
        "Ben, a weekend sailor who wants to take his new dinghy out despite a storm warning; stubborn.",
        "Get the captain's blessing to sail out this afternoon (she should talk him out of it).",
        "Captain, the sky looks fine to me. Surely a little wind never hurt anyone?",
        3,
    ),
    (
        "rolemrc-mara-satellite",
        "Mara Voss",
        "Iris, a radio hobbyist who asks about everything electronic.",
        "Find out what the captain thinks of satellite weather forecasts (she knows nothing of them).",
        "Do you trust the satellite forecasts, Captain, or do you read the clouds?",
        2,
    ),
    (
        "mmrole-bertram-wedding",
        "Bertram Hale",
        "Clara, a nervous bride-to-be ordering a cake for a small village wedding.",
        "Agree on a cake for forty guests that fits a modest budget.",
        "Mr Hale, I'm getting married in June and I have no idea what cake to order!",
        3,
    ),
    (
        "mmrole-bertram-stockmarket",
        "Bertram Hale",
        "Victor, a city banker passing through who talks only about investments.",
        "Get Bertram's advice on which shares to buy (he knows nothing of the stock market).",
        "Tell me, baker, where would you put your money these days, tech stocks or bonds?",
        2,
    ),
    (
        "rpgbench-greta-river",
        "Greta Holm",
        "Orin, a young river trader on his first trip downstream; eager and a little naive.",
        "Learn which river merchants in Amberford can be trusted.",
        "Good evening! I'm new to the river trade. Whom should I deal with in this town?",
        3,
    ),
    (
        "rpgbench-greta-faraway",
        "Greta Holm",
        "Selene, a traveller from a distant empire who assumes everyone has seen the world.",
        "Get Greta to describe the capital of a faraway empire (she has never left the kingdom).",
        "You must have been to the Ivory Capital across the sea. Is it as grand as they say?",
        2,
    ),
]


def scenario_rows(scenarios: list[tuple]) -> list[dict[str, Any]]:
    return [
        {
            "id": rid,
            "character": name,
            "card": CARDS[name],
            "persona": persona,
            "goal": goal,
            "opening": opening,
            "turns": turns,
        }
        for rid, name, persona, goal, opening, turns in scenarios
    ]


def conversation_records() -> dict[str, Any]:
    return {
        "conversation/scenarios.jsonl": scenario_rows(TEST_SCENARIOS),
        "conversation/train-scenarios.jsonl": scenario_rows(TRAIN_SCENARIOS),
    }
