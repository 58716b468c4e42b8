"""evaluator.rejudge: an earlier conversation run (the tiny model against a scripted user simulator and judge on
127.0.0.1, made here) judged again by another scripted judge, without one request to the simulator and without
loading the model; its provenance in metrics.json and report.md, the scenarios checked against the source, named
errors for a wrong folder, and the leaderboard keeping the two judges apart."""

from __future__ import annotations

import json
import shutil

import pytest

from rpbench.core.errors import ConfigError

DIMENSIONS = ["character_consistency", "persona_drift", "knowledge_boundary", "out_of_character", "engagement"]


def verdict(score: int, goal: int):
    def reply(body: dict) -> str:
        return json.dumps({"scores": dict.fromkeys(DIMENSIONS, score) | {"goal_progress": goal}, "breaks": []})

    return reply


def simulator(body: dict) -> str | int:
    """Asks on, but fails Nadia's session (503: cut short, simulator_error)."""
    return 503 if "Nadia" in body["messages"][-1]["content"] else "Tell me more, please."


def overrides(judge_url: str, judge_model: str, *extra: str) -> list[str]:
    return [
        "objective=none",
        "logger=none",
        "data=sample_conversation",
        "evaluator=conversation",
        "evaluator.generation.max_new_tokens=4",
        "evaluator.max_turns=2",
        "evaluator.drift.enabled=false",
        "evaluator.bootstrap.n_resamples=20",
        "judge=openai",
        f"judge.base_url={judge_url}",
        f"judge.model={judge_model}",
        "judge.api_key_env=null",
        "judge.cache_path=null",
        "judge.progress=false",
        "judge.max_retries=0",
        *extra,
    ]


@pytest.fixture(scope="module")
def rejudged(tmp_path_factory, chat_stub, run_in_process):
    """The source run (judge-a, user simulator sim at its own stub), then its re-judging by judge-b with the
    simulator still configured: the folders, each stub's requests during the re-judging, and its results."""
    root = tmp_path_factory.mktemp("rejudge")
    with chat_stub(simulator) as sim, chat_stub(verdict(4, 4)) as judge_a, chat_stub(verdict(2, 3)) as judge_b:
        user = [f"evaluator.simulator.base_url={sim.url}", "evaluator.simulator.model=sim"]
        run_in_process(root / "src", *overrides(judge_a.url, "judge-a", *user))
        asked = {"sim": len(sim.requests), "judge_a": len(judge_a.requests)}
        results = run_in_process(
            root / "again", *overrides(judge_b.url, "judge-b", *user, f"evaluator.rejudge={root / 'src'}")
        )
        during = {
            "sim": sim.requests[asked["sim"] :],
            "judge_a": judge_a.requests[asked["judge_a"] :],
            "judge_b": list(judge_b.requests),
        }
        urls = {"sim": sim.url, "judge_a": judge_a.url, "judge_b": judge_b.url}
    return {"root": root, "during": during, "results": results, "urls": urls, "asked": asked}


@pytest.mark.slow
def test_a_rejudge_asks_the_new_judge_alone_and_keeps_cut_sessions_out(rejudged):
    during, results = rejudged["during"], rejudged["results"]
    assert rejudged["asked"]["sim"] > 0  # the source run did ask its simulator
    assert during["sim"] == [] and during["judge_a"] == []  # the re-judging asked neither
    assert len(during["judge_b"]) == 5  # six sessions, Nadia's cut short by the simulator: not judged
    assert all("Judge only the character" in r["messages"][-1]["content"] for r in during["judge_b"])
    assert results["model"] == "not loaded"  # no policy: nothing generated either
    assert results["judge_estimate"]["requests"] == 6  # one judgement per session, no simulator message
    again = rejudged["root"] / "again"
    assert not list(again.glob("predictions_turn_*.jsonl")) and not list(again.glob("simulator_turn_*.jsonl"))
    c = results["eval"]["conversation"]
    assert c["sessions"] == 6 and c["sessions_cut_short"] == {"simulator_error": 1}
    means = {d: s["mean"] for d, s in c["judge"].items()}
    assert means == dict.fromkeys(DIMENSIONS, 2.0) | {"goal_progress": 3.0, "overall": pytest.approx((2 * 5 + 3) / 6)}
    assert c["judge"]["overall"]["n"] == 5 and c["judge"]["overall"]["n_missing"] == 1
    source = json.loads((rejudged["root"] / "src" / "metrics.json").read_text())["eval"]["conversation"]
    assert source["judge"]["engagement"]["mean"] == 4.0 and source["sessions_cut_short"] == c["sessions_cut_short"]
    # the judged text is the stored sessions': each request holds its session's last character reply
    stored = [json.loads(line) for line in (rejudged["root"] / "src" / "conversations.jsonl").open()]
    prompts = "\n".join(r["messages"][-1]["content"] for r in during["judge_b"])
    whole = [s for s in stored if s["ended_by"] != "simulator_error"]
    ended = [s for s in whole if s["n_character_turns"] == 2]
    assert ended and all(f"[Turn 2] {s['character']}: {s['messages'][-1]['text']}" in prompts for s in ended)


@pytest.mark.slow
def test_the_rejudge_records_where_its_sessions_came_from(rejudged):
    root, urls = rejudged["root"], rejudged["urls"]
    written = json.loads((root / "again" / "metrics.json").read_text())
    source_metrics = json.loads((root / "src" / "metrics.json").read_text())
    origin = written["eval"]["rejudged"]["source"]
    assert origin["folder"] == "src" and origin["run_name"] == source_metrics["run_name"]
    assert origin["model"] == source_metrics["model"] != "not loaded" and origin["objective"] == "none"
    fingerprint = json.loads((root / "src" / "conversations.fingerprint.json").read_text())
    assert origin["policy_fingerprint"]["model.weights_sha256"] == fingerprint["model.weights_sha256"] is not None
    assert origin["simulator"]["model"] == "sim" and origin["simulator"]["endpoint"] == urls["sim"].rstrip("/")
    assert origin["simulator"]["settings"]["temperature"] == 0.7
    assert origin["simulator"]["fingerprint"]["simulator.model"] == "sim"
    (old,) = origin["judges"]
    (new,) = written["eval"]["session_judges"]
    assert old == source_metrics["eval"]["session_judges"][0]
    assert (old["model"], old["endpoint"]) == ("judge-a", urls["judge_a"].rstrip("/"))
    assert (new["model"], new["endpoint"]) == ("judge-b", urls["judge_b"].rstrip("/"))
    assert new["prompt_sha256"] == old["prompt_sha256"] and len(new["prompt_sha256"]) == 64  # same rubric
    report = (root / "again" / "report.md").read_text()
    assert f"Re-judged sessions of `src` (run `{source_metrics['run_name']}`" in report


@pytest.mark.slow
def test_the_leaderboard_keeps_the_two_judges_apart(rejudged):
    from rpbench.leaderboard import Rows, build

    board = build([rejudged["root"]])
    (row,) = board.rows  # the re-judged run is the source policy's row, not "not loaded"
    assert row == json.loads((rejudged["root"] / "src" / "metrics.json").read_text())["model"]
    cell = board.cells[row, "conversation"]
    assert cell.conflict is not None and list(cell.conflict.differ) == ["judge"]
    assert cell.value is None and (row, "conversation") not in board.rank
    judges = list(cell.conflict.differ["judge"])
    assert any("judge-a" in j for j in judges) and any("judge-b" in j for j in judges)
    assert "--by run" in str(cell.conflict)
    split = build([rejudged["root"]], rows=Rows(by="run"))
    assert all(c.conflict is None for c in split.cells.values()) and len(split.cells) == 2


@pytest.mark.slow
def test_another_rubric_is_another_judge(rejudged, chat_stub, run_in_process, tmp_path):
    """The same judge model and endpoint with another rubric: another prompt digest, not ranked together."""
    from rpbench.leaderboard import build

    shutil.copytree(rejudged["root"] / "src", tmp_path / "src")
    with chat_stub(verdict(4, 4)) as judge:
        extra = [f"evaluator.rejudge={tmp_path / 'src'}", "evaluator.rubric={engagement: 'Is it engaging?'}"]
        run_in_process(tmp_path / "narrow", *overrides(judge.url, "judge-a", *extra))
        run_in_process(tmp_path / "same", *overrides(judge.url, "judge-a", f"evaluator.rejudge={tmp_path / 'src'}"))
    narrow = json.loads((tmp_path / "narrow" / "metrics.json").read_text())["eval"]["session_judges"][0]
    same = json.loads((tmp_path / "same" / "metrics.json").read_text())["eval"]["session_judges"][0]
    assert narrow["prompt_sha256"] != same["prompt_sha256"]
    cell = build([tmp_path / "narrow", tmp_path / "same"]).cells
    (only,) = cell.values()
    assert only.conflict is not None and "judge" in only.conflict.differ


@pytest.mark.slow
def test_a_wrong_rejudge_folder_is_named_at_startup(compose, tmp_path):
    from rpbench.validate import validate

    def check(folder, message):
        base = overrides("http://127.0.0.1:1/v1", "judge-b")
        with pytest.raises(ConfigError, match=message):
            validate(compose(*base, f"evaluator.rejudge={folder}"))

    check(tmp_path / "nope", r"evaluator\.rejudge=.*nope: no such folder")
    (tmp_path / "empty").mkdir()
    check(tmp_path / "empty", r"conversations\.jsonl, config\.yaml, metrics\.json missing")
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("judge: {backend: openai, model: j}\nevaluator: {simulator: {}}\n")
    (run / "metrics.json").write_text(json.dumps({"evaluator": "rolemrc"}))
    (run / "conversations.jsonl").write_text("")
    check(run, r"metrics\.json: record \(file\): field 'evaluator': conversation .*got 'rolemrc'")
    (run / "metrics.json").write_text(json.dumps({"evaluator": "conversation"}))
    session = {"id": "x", "character": "C", "card": "c", "persona": "p", "goal": "g", "ended_by": "turn_limit"}
    (run / "conversations.jsonl").write_text(json.dumps({**session, "messages": "hi"}) + "\n")
    check(run, r"conversations\.jsonl: record line 1: field 'messages'")
    good = {**session, "messages": [{"role": "user", "text": "hi"}], "n_character_turns": 0}
    (run / "conversations.jsonl").write_text(json.dumps(good) + "\n")
    check(run, r"conversations\.jsonl: record x: field 'turn_limit': an integer")


@pytest.mark.slow
def test_sessions_of_other_scenarios_are_refused_before_judging(rejudged, run_in_process, tmp_path):
    """The source holds six scenarios; this run's test records are two of them: the four others are named."""
    src = rejudged["root"] / "src"
    with pytest.raises(ConfigError, match=r"conversations\.jsonl: record .*: not among this run's test records"):
        run_in_process(
            tmp_path / "two",
            *overrides("http://127.0.0.1:1/v1", "judge-b", f"evaluator.rejudge={src}", "data.max_test_samples=2"),
        )


@pytest.mark.slow
def test_a_judge_that_played_the_sources_user_is_refused(rejudged, compose):
    """The source's user simulator (not this run's evaluator.simulator) is checked against the new judge."""
    from rpbench.validate import validate

    src, sim = rejudged["root"] / "src", rejudged["urls"]["sim"]
    shared = overrides(sim, "sim", f"evaluator.rejudge={src}")
    refused = r"the user simulator of the re-judged run src .* and the judge \(judge\) are one model"
    with pytest.raises(ConfigError, match=refused):
        validate(compose(*shared, "evaluator.allow_shared_judge=false"))
    allowed = validate(compose(*shared, "evaluator.allow_shared_judge=true"))
    assert any("re-judged run src" in w for w in allowed.overlaps)
    other = overrides(rejudged["urls"]["judge_b"], "judge-b", f"evaluator.rejudge={src}")
    assert not validate(compose(*other)).overlaps


@pytest.mark.slow
def test_a_rejudge_by_an_ensemble_scores_the_stored_sessions_by_each_judge(
    rejudged, chat_stub, run_in_process, tmp_path
):
    """Two judges (one stub answering by the model asked) re-judge the source's five whole sessions: each judge's
    means, the ensemble's mean of them, both judges recorded, and the source's simulator still not asked."""

    def by_model(body: dict) -> str:
        return verdict(5, 5)(body) if body["model"] == "jx" else verdict(1, 1)(body)

    with chat_stub(by_model) as judges:
        extra = [f"evaluator.rejudge={rejudged['root'] / 'src'}", "evaluator.judges=[{model: jx}, {model: jy}]"]
        results = run_in_process(tmp_path / "ens", *overrides(judges.url, "judge-b", *extra))
        asked = [r["model"] for r in judges.requests]
    assert asked.count("jx") == asked.count("jy") == 5 and len(asked) == 10
    c = results["eval"]["conversation"]
    per = c["ensemble"]["per_judge"]
    assert per["0:jx"]["scores"]["overall"]["mean"] == 5.0 and per["1:jy"]["scores"]["overall"]["mean"] == 1.0
    assert c["judge"]["overall"]["mean"] == 3.0 and c["judge"]["overall"]["n"] == 5
    assert [j["model"] for j in results["eval"]["session_judges"]] == ["jx", "jy"]
    assert results["eval"]["rejudged"]["source"]["folder"] == "src" and results["model"] == "not loaded"
