"""evaluator=coser: CoSER's flaw counting and length correction against hand-computed values and the authors'
published verdicts, the test-set reader's named errors, and whole scenes run against scripted parties and judge
on 127.0.0.1 (resumed after a kill)."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from rpbench.core.errors import DataFormatError
from rpbench.data import readers
from rpbench.data.coser import CoserOptions
from rpbench.data.files import package_path
from rpbench.scoring.judge.coser import (
    DIMENSIONS,
    dimension_means,
    dimension_score,
    parse_flaws,
    parse_next_speaker,
    session_average,
)

SAMPLE = package_path("pkg://rpbench/resources/sample/coser/test_set.json")
OPTIONS = CoserOptions(splits=("test", "ood"), max_rounds=20, task_dimensions=None)
GOLDEN = Path(__file__).parents[1] / "fixtures" / "coser" / "published_gpt-4o_verdict_numbers.json"


def test_flaws_and_length_correction_by_hand():
    # severities 3 + 1 (missing) + 2 = 6; 4 character messages forgive 1.2: 100 - 5 * 4.8 = 76
    reply = 'ok {"Anthropomorphism": {"flaws": [{"severity": 3}, {"instance": "x"}, {"severity": 2}]}} done'
    assert parse_flaws(reply, "Anthropomorphism") == [3, 1, 2]
    assert dimension_score([3, 1, 2], 4) == pytest.approx(76.0)
    assert dimension_score([], 10) == 100.0  # no flaws: clipped at 100, not 115
    assert dimension_score([5] * 5, 0) == 0.0  # 25 severity points: clipped at 0, not -25
    assert session_average(dict.fromkeys(DIMENSIONS, 50.0) | {"Anthropomorphism": 70.0}) == 55.0
    assert session_average(dict.fromkeys(DIMENSIONS, 50.0) | {"Anthropomorphism": None}) is None


@pytest.mark.parametrize(
    "reply",
    [
        "no json here",
        '{"Storyline Quality": {"flaws": []}}',  # another dimension
        '{"Anthropomorphism": {"flaws": [{"severity": "3"}]}}',  # not a whole number (the authors skip it silently)
        '{"Anthropomorphism": {"flaws": [{"severity": 2.5}]}}',
        '{"Anthropomorphism": {"problems": []}}',
    ],
)
def test_an_unreadable_verdict_is_none(reply):
    assert parse_flaws(reply, "Anthropomorphism") is None


def test_next_speaker_is_read_from_the_last_marked_line():
    assert parse_next_speaker("1. Reasoning: Tobin is scared.\n2. Next Speaker: **Mara**.") == "Mara"
    assert parse_next_speaker("Next speaker is Tobin\nNext Speaker - Environment") == "Environment"
    assert parse_next_speaker(" Tobin ") == "Tobin"


def test_the_published_gpt4o_verdicts_aggregate_to_the_published_scores():
    """CoSER's released judge outputs (numbers only, tests/fixtures/coser/README.md): every per-dimension score,
    every scene score and the file's averages."""
    golden = json.loads(GOLDEN.read_text())
    scored = []
    for case in golden["cases"]:
        scores = {d: dimension_score(case["severities"][d], case["actor_rounds"]) for d in DIMENSIONS}
        assert scores == pytest.approx(case["scores"]), case["case"]
        assert session_average(scores) == pytest.approx(case["score"])
        scored.append(scores)
    means = dimension_means(scored)
    published = golden["published"]
    assert {d: means[d] for d in DIMENSIONS} == pytest.approx({d: published[d] for d in DIMENSIONS})
    assert means["average"] == pytest.approx(published["avg"])


def test_the_sample_is_read_by_split():
    result = readers.read("coser", "test", SAMPLE, OPTIONS)
    assert result.counts == {"test": 2, "ood": 1}
    first = result.examples[0]
    assert first.id == "The Lighthouse Keeper-3-0" and first.task == "test"
    assert first.meta["character"] == "Mara" and first.meta["speakers"] == ["Mara", "Tobin", "Environment"]
    # the plot's description, then character_profiles' (the authors' combination)
    assert (
        first.meta["profiles"]["Mara"]
        == "Keeper of the light for twenty years.\n\nBlunt, patient, weathered by the sea."
    )
    assert "I cannot let the boat hit the reef" in first.prompt[0].content
    ood = readers.read("coser", "test", SAMPLE, replace(OPTIONS, splits=("ood",)))
    assert [e.id for e in ood.examples] == ["Salt Roads-1-0"]
    assert ood.examples[0].meta["speakers"] == ["Idris", "Noor", "Environment"]  # the environment added


@pytest.mark.parametrize(
    "change, field",
    [
        (lambda s: s.pop("scenario"), "scenario"),
        (lambda s: s.update(tag="train"), "tag"),
        (lambda s: s["plot"].pop("i_p"), "plot.i_p"),
        (lambda s: s.update(major_characters=[]), "major_characters"),
        (lambda s: s["dialogues"][1].update(message=None), "dialogues[1].message"),
        (lambda s: s.update(major_characters=["Nobody"]), "major_characters[0]"),
    ],
)
def test_a_malformed_scene_is_named_by_file_record_and_field(tmp_path, change, field):
    scenes = json.loads(SAMPLE.read_text())
    change(scenes[1])
    path = tmp_path / "test_set.json"
    path.write_text(json.dumps(scenes))
    with pytest.raises(DataFormatError) as error:
        readers.read("coser", "test", path, OPTIONS)
    assert str(path) in str(error.value) and field in str(error.value) and "1" in str(error.value)


# Scripted parties and judge, one endpoint: each request is told apart by its system prompt.
def party_reply(body: dict) -> str | int:
    system, user = body["messages"][0]["content"], body["messages"][-1]["content"]
    if system.startswith("You direct a role-play scene"):
        history = user.removeprefix("The scene so far:\n\n").removesuffix("\n\nWho acts next?").split("\n\n")
        last = history[-1]
        if "Noor" in system:  # the dunes: Noor answers Idris, the evaluated character
            return "Next Speaker: Idris" if last.startswith("Noor:") else "Next Speaker: Noor"
        if len(history) >= 6:  # the lighthouse scenes end after 6 messages
            return "Reasoning: done.\nNext Speaker: <END CHAT>"
        if "Inspector Hale" in system and last.startswith("Environment:"):
            return "Next Speaker: Inspector Hale"
        return "Next Speaker: Mara" if last.startswith(("Environment:", "Inspector Hale:")) else "Environment"
    if system.startswith("You are an environment model"):
        return "[unseen] Thunder rolls over the rock."
    if system.startswith("You are reviewing a simulated scene"):
        dimension = re.search(r"Judge only (.+?): ", system).group(1)
        if dimension == "Storyline Quality" and "Inspector Hale" in system:
            return "I would rather not say."  # never a verdict: a parse failure, counted, not scored
        return json.dumps({dimension: {"flaws": [{"severity": 2}, {"severity": 3}]}})
    if "Inspector Hale" in system.split("\n", 1)[0]:
        return "[She hides something.] (taps the ledger) Forty minutes dark, keeper."
    return "(nods) North, then."


def run_overrides(url: str) -> list[str]:
    parties = [
        f"evaluator.{p}.{k}={v}"
        for p in ("simulator", "environment", "next_speaker")
        for k, v in (("base_url", url), ("model", f"{p}-model"), ("api_key_env", "null"))
    ]
    return [
        "objective=none",
        "logger=none",
        "data=sample_coser",
        "evaluator=coser",
        "evaluator.max_turns=4",
        "evaluator.generation.max_new_tokens=4",
        "evaluator.bootstrap.n_resamples=20",
        *parties,
        "judge=openai",
        f"judge.base_url={url}",
        "judge.model=judge-model",
        "judge.api_key_env=null",
        "judge.cache_path=null",
        "judge.progress=false",
        "judge.parse_tries=1",
    ]


@pytest.mark.slow
def test_scenes_are_played_judged_and_resumed(tmp_path, chat_stub, run_in_process):
    run = tmp_path / "run"
    with chat_stub(party_reply) as stub:
        results = run_in_process(run, *run_overrides(stub.url))["eval"]
        asked = len(stub.requests)
        # a rerun in the same folder asks nothing again: the model's turns, scene steps and verdicts are read back
        again = run_in_process(run, *run_overrides(stub.url))["eval"]
        assert asked > 0 and len(stub.requests) == asked
        # killed while judging: five verdicts written, the sixth cut off mid-line; only the rest are asked again
        verdicts = (run / "judgements.jsonl").read_text().splitlines(keepends=True)
        (run / "judgements.jsonl").write_text("".join(verdicts[:5]) + verdicts[5][:20])
        resumed = run_in_process(run, *run_overrides(stub.url))["eval"]
        judged_again = [r for r in stub.requests[asked:] if r["model"] == "judge-model"]
        assert len(stub.requests) - asked == len(judged_again) == len(verdicts) - 5 == 7
    table = results["coser"]
    # 2 + 3 severity points less 0.3 per character message
    sessions = {json.loads(line)["id"]: json.loads(line) for line in (run / "conversations.jsonl").open()}
    assert set(sessions) == {"The Lighthouse Keeper-3-0", "The Lighthouse Keeper-4-1", "Salt Roads-1-0"}
    judgements = {json.loads(line)["id"]: json.loads(line) for line in (run / "judgements.jsonl").open()}
    for key, j in judgements.items():
        if j["status"] == "ok":
            assert j["score"] == pytest.approx(100 - 5 * (5 - 0.3 * j["character_messages"])), key
    hale = judgements["The Lighthouse Keeper-4-1#Storyline Quality"]
    assert (hale["status"], hale["score"]) == ("parse_failure", None)
    test = table["test"]
    assert (test["scenes"], test["judged_scenes"]) == (2, 2)
    assert test["dimensions"]["Storyline Quality"]["parse_failures"] == 1
    assert test["dimensions"]["Storyline Quality"]["n"] == 1  # the failure left out, not scored 0
    assert table["ood"]["scenes"] == 1
    means = [test["dimensions"][d]["mean"] for d in DIMENSIONS]
    assert test["average"] == pytest.approx(sum(means) / 4)
    # the lighthouse scene: Mara, the environment, Mara, ... until the next-speaker step ends it at 6 messages
    lighthouse = sessions["The Lighthouse Keeper-3-0"]
    assert lighthouse["ended_by"] == "simulator"
    shown = [m["text"] for m in lighthouse["messages"] if m["role"] == "user"][1:]
    assert shown and all(t.startswith("Environment: Thunder rolls") for t in shown)  # thoughts removed
    # the inspector's scene opens with the environment and the inspector (turn 0), before the model speaks
    opening = sessions["The Lighthouse Keeper-4-1"]["messages"][0]["text"]
    assert "Environment: Thunder rolls" in opening and "Inspector Hale: (taps the ledger)" in opening
    assert results["prompts"]["judge"]["origin"] == "rpbench"
    assert again["coser"] == table == resumed["coser"] and again["resumed"]["sessions_resumed"] == 3


def test_a_scene_party_played_by_the_judge_is_refused_at_startup(compose, refused_at_startup):
    judge = ("judge=openai", "judge.base_url=http://localhost:9/v1", "judge.model=judge-7b", "judge.api_key_env=null")
    own = [
        f"evaluator.{p}.{k}={v}"
        for p in ("simulator", "environment")
        for k, v in (("base_url", "http://localhost:8/v1"), ("model", f"{p}-7b"))
    ]
    base = ("objective=none", "data=sample_coser", "evaluator.allow_shared_judge=false", *judge)
    message = refused_at_startup(compose, *base, *own)  # the next-speaker step left on the judge's endpoint
    assert (
        "the next-speaker step (evaluator.next_speaker) and the judge (judge) are one model, judge-7b "
        "(http://localhost:9/v1)" in message
    )
    assert "evaluator.allow_shared_judge=true" in message and "evaluator.environment" not in message


def test_a_judge_of_the_played_model_s_family_is_a_warning_with_coser_s_way_out(compose):
    from rpbench.validate import validate

    overrides = [o for o in run_overrides("http://localhost:9/v1") if not o.startswith("judge.model=")]
    found = validate(compose(*overrides, "judge.model=Qwen/Qwen2.5-72B-Instruct")).overlaps
    assert found == (
        "the judge (judge), Qwen/Qwen2.5-72B-Instruct (http://localhost:9/v1), is of the evaluated model's family "
        "(qwen: tiny-qwen2): a judge may favour its own family's replies, and its self-preference could not be "
        "measured: no judge of another family scores the same sessions (CoSER has one judge: choose one of another "
        "family to avoid it)",
    )


def failing_reply(body: dict) -> str | int:
    """The inspector's endpoint refuses (HTTP 400, not retried) and the judge refuses the dunes' Anthropomorphism."""
    system = body["messages"][0]["content"]
    if system.startswith("You are Inspector Hale"):
        return 400
    if system.startswith("You are reviewing") and "Salt Roads" in system and "Judge only Anthropomorphism" in system:
        return 400
    return party_reply(body)


@pytest.mark.slow
def test_failed_requests_are_counted_and_never_scored(tmp_path, chat_stub, run_in_process):
    run = tmp_path / "run"
    with chat_stub(failing_reply) as stub:
        results = run_in_process(run, *run_overrides(stub.url))["eval"]
    test, ood = results["coser"]["test"], results["coser"]["ood"]
    # the inspector's scene could not open: cut short, counted, not judged
    assert test["cut_short"] == {"opening_error": 1} and (test["scenes"], test["judged_scenes"]) == (2, 1)
    assert list(results["opening_failures"]) == ["The Lighthouse Keeper-4-1"]
    unanswered = ood["dimensions"]["Anthropomorphism"]
    assert (unanswered["request_failures"], unanswered["n"], unanswered["mean"]) == (1, 0, None)
    assert ood["average"] is None  # no number built on a failed request
    assert ood["dimensions"]["Storyline Quality"]["mean"] is not None


def test_the_authors_templates_are_read_from_a_clone_with_their_sha256(tmp_path):
    """A stand-in clone in the layout of Neph0s/CoSER (invented text): the environment's and next speaker's
    f-strings in gca_evaluation/utils.py, the judge's replace-style template (literal JSON braces) and the
    dimensions' criteria in gca_evaluation/prompts.py."""
    import hashlib

    from rpbench.data.coser_prompts import CoserPrompts

    folder = tmp_path / "CoSER" / "gca_evaluation"
    folder.mkdir(parents=True)
    (folder / "utils.py").write_text(
        "def env(major_characters, scenario):\n"
        "    prompt = f'''Be {random.choice(model_roles)}; not {major_characters}. {scenario}'''\n"
        "    return prompt\n\n"
        "def nsp(all_characters, scenario):\n"
        "    prompt = f'''Pick from {all_characters} or the {ENVIRONMENT}. {scenario}'''\n"
        "    return prompt\n"
    )
    details = {
        d: {"dimension_brief": f"brief of {d}", "dimension_criteria": f"* {d} for {{major_characters}}"}
        for d in DIMENSIONS
    }
    template = (
        "Judge {book} ({major_characters}) on {dimension_name}: {dimension_brief} {additional_instructions} "
        "{plot_summary} {scenario} {character_profiles} {original_conversation} {dimension_criteria} "
        'Answer {\n "{dimension_name}": {"flaws": []}\n}'
    )
    critic = {"self-play-deduct-template": template, "dimension_details": details}
    (folder / "prompts.py").write_text(f"critic_prompts = {critic!r}\n")
    prompts = CoserPrompts.load(tmp_path / "CoSER")
    judge = prompts.judge_prompt(
        "Anthropomorphism",
        book="B",
        major_characters="Mara, Tobin",
        additional_instructions="",
        plot_summary="P",
        scenario="S",
        character_profiles="C",
        original_conversation="O",
    )
    assert judge == (
        "Judge B (Mara, Tobin) on Anthropomorphism: brief of Anthropomorphism  P S C O * Anthropomorphism for "
        'Mara, Tobin Answer {\n "Anthropomorphism": {"flaws": []}\n}'
    )
    nsp = prompts.render("next_speaker", environment="Environment", all_characters="['A']", scenario="S")
    assert nsp == "Pick from ['A'] or the Environment. S"
    record = prompts.record()
    assert record["environment"]["origin"] == "gca_evaluation/utils.py:prompt"
    assert record["next_speaker"]["origin"] == "gca_evaluation/utils.py:prompt#1"
    assert record["judge"]["origin"] == "gca_evaluation/prompts.py:critic_prompts"
    text = prompts.templates["next_speaker"].text
    assert record["next_speaker"]["sha256"] == hashlib.sha256(text.encode()).hexdigest()
    assert CoserPrompts.load(None).record()["judge"]["origin"] == "rpbench"
