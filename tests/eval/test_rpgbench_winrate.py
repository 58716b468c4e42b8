"""RPGBench WinRate through a recording chat-completions server on 127.0.0.1: what the judge is shown
(character, persona, dialogue from the record's meta), per-judge tallies and the ensemble mean per
category and per shift by hand, the report's tables and the pilot figure."""

from __future__ import annotations

import json
import re

import pytest

from rpbench.core.errors import DataFormatError
from rpbench.data.records import EvalExample, Turn
from rpbench.eval.benchmarks.rpgbench.report import (
    plot_severity,
    severity_figure,
    severity_points,
    winrate_section,
)
from rpbench.scoring.judge.winrate import judge_winrate, mean_of_categories

SHIFT_OF = {"IDTest": "in_distribution", "german": "user", "japanese": "user", "Literature": "character"}
CHARACTER = {"name": "Greta Holm", "occupation": "innkeeper in Bergen", "traits": ["gruff", "kind"]}
PERSONA = "A retired sailor from Kiel who collects ship bells."
DIALOGUE = [
    {"role": "user", "content": "Evening! Is the fire still lit?"},
    {"role": "assistant", "content": "Always, for those who knock."},
    {"role": "user", "content": "Any rooms free tonight?"},
]


@pytest.fixture(scope="module")
def verdict_tokens(group_values):
    """The reply length of evaluator=rpgbench's judge (the WinRate choice)."""
    return group_values("evaluator", "rpgbench", "evaluator")["judge_max_tokens"]


def record(rid: str, subtype: str, golden: str, **meta) -> EvalExample:
    # The prompt turns hold text the judge must not need: it reads meta.
    prompt = (Turn("system", "PROMPT-ONLY system text"), Turn("user", "PROMPT-ONLY user text"))
    fields = {"shift": SHIFT_OF[subtype], "category": subtype, "persona": PERSONA, "character": CHARACTER}
    return EvalExample(rid, prompt, golden, subtype, {**fields, "dialogue": DIALOGUE, **meta})


# (record, model prediction). Judge "alpha" prefers the candidate holding GOOD (else answers B); judge
# "beta" prefers the one holding WARM (else answers A) and cannot answer when MUDDLED is shown.
RECORDS = [
    (record("r1", "IDTest", "WARM plain golden"), "GOOD reply"),  # alpha 2/2, beta 0/2
    (record("r2", "IDTest", "GOOD WARM golden"), "meh reply"),  # alpha 0/2, beta 0/2
    (record("r3", "german", "fine golden"), "GOOD MUDDLED reply"),  # alpha 2/2, beta no verdict
    (record("r4", "Literature", "plain golden"), "plain reply"),  # alpha 1/2 (B), beta 1/2 (A)
    (record("r5", "japanese", "GOOD golden", persona={"name": "Aiko", "hobby": "calligraphy"}), "WARM reply"),
]  # r5: alpha 0/2, beta 2/2
CANDIDATES = re.compile(r"## Response A\n(.*?)\n\n## Response B\n(.*?)\n\nWhich", re.DOTALL)


def reply(body: dict) -> str:
    first_user = next(m["content"] for m in body["messages"] if m["role"] == "user")
    a, b = CANDIDATES.search(first_user).groups()
    if body["model"] == "alpha":
        return "A" if "GOOD" in a else "B"
    if "MUDDLED" in a + b:
        return "no idea"
    return "Answer: A" if "WARM" in a else "B" if "WARM" in b else "A"


@pytest.fixture(scope="module")
def judges(judge_config):
    def judges(url: str) -> list:
        return [judge_config(base_url=url, model=name, parse_tries=2) for name in ("alpha", "beta")]

    return judges


@pytest.fixture(scope="module")
def judged(chat_stub, verdict_tokens, judges):
    with chat_stub(reply) as server:
        result = judge_winrate(
            [e for e, _ in RECORDS], {e.id: p for e, p in RECORDS}, judges(server.url), verdict_tokens
        )
        return result, server.requests


@pytest.mark.slow
def test_the_judge_is_shown_character_persona_and_dialogue_not_the_prompt_turns(judged):
    _, requests = judged
    # alpha: 5 records x 2 orders; beta: the same, plus one re-ask of r3's two unreadable replies
    assert len(requests) == 10 + 12
    for body in requests:
        text = json.dumps(body)
        assert "PROMPT-ONLY" not in text
        for piece in ("Greta Holm", "innkeeper in Bergen", "gruff", *(t["content"] for t in DIALOGUE)):
            assert piece in text
    r5 = [b for b in requests if "WARM reply" in json.dumps(b)]
    assert len(r5) == 4 and all("Aiko" in json.dumps(b) and "calligraphy" in json.dumps(b) for b in r5)
    others = [b for b in requests if "WARM reply" not in json.dumps(b)]
    assert all(PERSONA in json.dumps(b) for b in others)


def test_per_judge_tallies_and_ensemble_means_by_hand(judged):
    result, _ = judged
    assert result["judges"] == ["0:alpha", "1:beta"]
    alpha, beta = (result["per_judge"][j] for j in result["judges"])
    assert alpha["overall"]["winrate"] == 5 / 10 and beta["overall"]["winrate"] == 3 / 8
    assert beta["overall"]["no_verdict"] == 2 and beta["overall"]["parse_failures"] == 2
    assert alpha["by_category"]["IDTest"] == {"n": 4, "judged": 4, "wins": 2.0, "no_verdict": 0, "winrate": 0.5}
    assert beta["by_category"]["IDTest"]["winrate"] == 0.0
    assert beta["by_category"]["german"] == {"n": 2, "judged": 0, "wins": 0, "no_verdict": 2, "winrate": None}
    assert alpha["by_shift"]["user"]["winrate"] == 0.5 and beta["by_shift"]["user"]["winrate"] == 1.0
    # ensemble = mean of the judges' WinRates, over the judges with a verdict in the group
    assert result["overall"] == {
        "winrate": pytest.approx((0.5 + 0.375) / 2),
        "n_judges": 2,
        "judged": 18,
        "no_verdict": 2,
        "n": 20,
        "parse_failures": 2,
        "request_failures": 0,
        "excluded_empty_predictions": 0,
    }
    assert {c: e["winrate"] for c, e in result["by_category"].items()} == pytest.approx(
        {"IDTest": 0.25, "german": 1.0, "japanese": 0.5, "Literature": 0.5}
    )
    assert result["by_category"]["german"] == {
        "winrate": 1.0,
        "n_judges": 1,
        "judged": 2,
        "no_verdict": 2,
        "n": 4,
        "excluded_empty_predictions": 0,
    }
    # per shift: each judge's WinRate over the shift's records first, then the mean (not the categories' mean)
    assert {s: e["winrate"] for s, e in result["by_shift"].items()} == pytest.approx(
        {"in_distribution": 0.25, "user": 0.75, "character": 0.5}
    )
    assert result["shift_of"] == SHIFT_OF
    r3 = [r for r in result["records"] if r["id"] == "r3" and r["judge"] == "1:beta"]
    assert [(r["status"], r["model_won"]) for r in r3] == [("parse_failure", None)] * 2


def test_per_shift_winrate_pooled_over_records_and_as_the_mean_of_its_categories(chat_stub, verdict_tokens, judges):
    """Three german records the model wins, one japanese it loses: pooled, the user shift's WinRate is 6/8;
    as the R-EMI roll-ups group (the mean over categories), (1 + 0) / 2."""
    rows = [(record(f"g{k}", "german", "plain golden"), "GOOD reply") for k in range(3)]
    rows += [(record("j1", "japanese", "GOOD golden"), "plain reply"), (record("i1", "IDTest", "g"), "GOOD")]
    with chat_stub(reply) as server:
        result = judge_winrate(
            [e for e, _ in rows], dict((e.id, p) for e, p in rows), judges(server.url)[:1], verdict_tokens
        )
    assert result["by_shift"]["user"]["winrate"] == pytest.approx(6 / 8)
    assert result["by_shift_mean_of_categories"] == {
        "in_distribution": {"winrate": 1.0, "categories": ["IDTest"], "without_winrate": []},
        "user": {"winrate": pytest.approx(0.5), "categories": ["german", "japanese"], "without_winrate": []},
    }
    lines = winrate_section(result).splitlines()
    assert "| user | 0.7500 | 0.2500 | 1 | 8 | 0 | 0 | 0.7500 (8/8) |" in lines  # the pooled table, drop from ID 1.0
    assert "| user | 0.5000 | german, japanese | none |" in lines
    assert any(line.startswith("| shift (its records pooled) | ensemble WinRate |") for line in lines)
    # a category without any verdict leaves its shift's mean undefined, and is named
    by_category = {"german": {"winrate": 0.2}, "japanese": {"winrate": None}, "Gaming": {"winrate": 0.4}}
    means = mean_of_categories(by_category, {"german": "user", "japanese": "user", "Gaming": "character"})
    assert means["user"] == {"winrate": None, "categories": ["german", "japanese"], "without_winrate": ["japanese"]}
    assert means["character"]["winrate"] == 0.4


def test_an_ensemble_without_any_verdict_has_no_winrate(chat_stub, verdict_tokens, judges):
    with chat_stub(lambda body: "either") as server:
        result = judge_winrate([RECORDS[0][0]], {"r1": "x"}, judges(server.url), verdict_tokens)
    assert result["overall"]["winrate"] is None and result["overall"]["n_judges"] == 0
    assert result["by_category"]["IDTest"] == {
        "winrate": None,
        "n_judges": 0,
        "judged": 0,
        "no_verdict": 4,
        "n": 4,
        "excluded_empty_predictions": 0,
    }


def test_empty_replies_are_not_judged_and_are_counted_per_group(chat_stub, verdict_tokens, judges):
    # r2's reply is empty (as an unclosed think block reads), r3's is whitespace: neither is judged; german
    # (r3 alone) has no WinRate, its record counted
    predictions = {e.id: p for e, p in RECORDS} | {"r2": "", "r3": "  "}
    with chat_stub(reply) as server:
        result = judge_winrate([e for e, _ in RECORDS], predictions, judges(server.url), verdict_tokens)
    assert {r["id"] for r in result["records"]} == {"r1", "r4", "r5"}
    assert result["overall"]["excluded_empty_predictions"] == 2 and result["overall"]["n"] == 2 * 2 * 3
    assert result["by_category"]["IDTest"]["excluded_empty_predictions"] == 1
    assert result["by_category"]["IDTest"]["n"] == 2 * 2
    german = result["by_category"]["german"]
    assert german["winrate"] is None and german["n"] == 0 and german["excluded_empty_predictions"] == 1
    assert result["by_shift"]["user"]["excluded_empty_predictions"] == 1


@pytest.mark.parametrize(
    "meta, field",
    [
        ({"character": None}, "meta.character"),
        ({"category": ""}, "meta.category"),
        ({"dialogue": [{"role": "assistant", "content": "hi"}]}, "meta.dialogue"),
        ({"dialogue": [{"role": "narrator", "content": "hi"}]}, r"meta.dialogue\[0\]"),
    ],
)
def test_records_without_what_the_judge_reads_are_named(meta, field, judge_config, verdict_tokens):
    bad = record("r9", "IDTest", "golden", **meta)
    with pytest.raises(DataFormatError, match=rf"record r9: field '{field}'"):
        judge_winrate([bad], {"r9": "x"}, [judge_config(model="x", base_url="http://127.0.0.1:9/v1")], verdict_tokens)
    missing = EvalExample("r8", (), "golden", "IDTest", {"shift": "in_distribution"})
    with pytest.raises(DataFormatError, match=r"record r8: field 'meta.category': missing"):
        judge_winrate(
            [missing], {"r8": "x"}, [judge_config(model="x", base_url="http://127.0.0.1:9/v1")], verdict_tokens
        )


def test_a_category_belongs_to_one_shift(judge_config, verdict_tokens):
    a, b = record("a", "german", "g"), record("b", "german", "g", shift="character")
    with pytest.raises(DataFormatError, match=r"record b: field 'meta.shift': 'character', but other records"):
        judge_winrate(
            [a, b], {"a": "x", "b": "y"}, [judge_config(model="x", base_url="http://127.0.0.1:9/v1")], verdict_tokens
        )


@pytest.mark.slow
def test_report_tables_per_category_and_shift_with_each_judge(judged):
    section = winrate_section(judged[0])
    lines = section.splitlines()
    row = next(line for line in lines if line.startswith("| german (user) |"))
    assert row == "| german (user) | 1.0000 | -0.7500 | 1 | 2 | 2 | 0 | 1.0000 (2/2) | – (0/2) |"
    row = next(line for line in lines if line.startswith("| IDTest (in_distribution) |"))
    assert row == "| IDTest (in_distribution) | 0.2500 | – | 2 | 8 | 0 | 0 | 0.5000 (4/4) | 0.0000 (4/4) |"
    assert "| user | 0.7500 | -0.5000 | 2 | 6 | 2 | 0 | 0.5000 (4/4) | 1.0000 (2/4) |" in lines
    shift_header = next(k for k, line in enumerate(lines) if line.startswith("| shift (its records pooled) |"))
    assert lines[shift_header].startswith("| shift (its records pooled) | ensemble WinRate | drop from in_distrib")
    assert lines[shift_header + 2].startswith("| in_distribution | 0.2500 | – |")
    category_header = next(k for k, line in enumerate(lines) if line.startswith("| category (shift) |"))
    assert lines[category_header + 2].startswith("| IDTest (in_distribution) |")
    assert "Overall ensemble WinRate: 0.4375 (2 judges with a verdict)" in section
    assert "No verdict (parse or request failure, never counted as a loss): 2 of 20" in section
    assert "left out of WinRate as of the R-EMID analysis: 0." in section


def test_pilot_figure_points_are_js_severity_against_ensemble_winrate(judged, tmp_path):
    jsd = {
        "german": {"user": 0.1, "character": 0.02, "dialogue": 0.03, "delta_p": 0.5},
        "japanese": {"user": 0.2, "character": 0.05, "dialogue": 0.01, "delta_p": 0.5},
        "Literature": {"user": 0.01, "character": 0.3, "dialogue": 0.02, "delta_p": 0.5},
    }
    results = {"jsd": jsd, "winrate": judged[0]}
    points = severity_points(results)
    expected = {"german": (0.15, 1.0), "japanese": (0.26, 0.5), "Literature": (0.33, 0.5)}
    assert set(points) == set(expected)
    assert all(points[c] == pytest.approx(xy) for c, xy in expected.items())
    path = plot_severity(results, "rpgbench-run", tmp_path / "js_vs_winrate.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plot_severity({"jsd": jsd}, "rpgbench-run", tmp_path / "none.png") is None
    fig = severity_figure(results, "rpgbench-run")
    [ax] = fig.axes
    assert fig.get_suptitle() == "rpgbench-run\nWinRate against shift severity, per shifted category"
    assert ax.get_xlabel() == "JS severity (user + character + dialogue)"
    assert ax.get_ylabel() == "WinRate (judge ensemble mean)"
    # each point numbered by severity; the key beside the plot names it, its shift and the verdicts it rests on
    key = " 1  german (user, 2 verdicts)\n 2  japanese (user, 4 verdicts)\n 3  Literature (character, 4 verdicts)"
    assert [t.get_text() for t in ax.texts] == ["1", "2", "3", key]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["IDTest WinRate"]
