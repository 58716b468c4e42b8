"""`python -m rpbench.conversation_variance <sweep>`: a real sweep of conversation runs over policy seeds, simulator
seeds and judges (one judge scoring by reply length, one not), and hand-made sweep folders in the runs' format for
the design's checks (missing, malformed, unbalanced)."""

from __future__ import annotations

import json
import re
import zlib
from pathlib import Path

import pytest
import yaml
from stub_endpoints import stub_judge

from rpbench.conversation_variance.cli import main
from rpbench.eval.benchmarks.base import write_jsonl

RUBRIC = ["character_consistency", "persona_drift", "knowledge_boundary"]


def job(sweep: Path, name: str, overrides: list[str], verdicts: dict[str, dict | None] | None, metrics: bool = True):
    """A job folder as a conversation run leaves it: .hydra/overrides.yaml, metrics.json, scores.jsonl (rows as
    the evaluator writes them: id, task, metrics, verdicts); ``verdicts`` None: no scores.jsonl."""
    folder = sweep / name
    (folder / ".hydra").mkdir(parents=True)
    (folder / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    if metrics:
        (folder / "metrics.json").write_text(json.dumps({"evaluator": "conversation", "eval": {}}))
    if verdicts is not None:
        rows = [{"id": i, "task": "t", "metrics": {"ooc_phrases": 0}, "verdicts": v} for i, v in verdicts.items()]
        write_jsonl(folder / "scores.jsonl", rows)


def crossed_sweep(sweep: Path, score, scenarios=("a", "b", "c"), judges=("x", "y")) -> None:
    """Two policy seeds x two simulator seeds x ``judges``; ``score(scenario, seed, sim, judge)`` each session's
    score on every rubric dimension."""
    num = 0
    for seed in (1, 2):
        for sim in (1, 2):
            for judge in judges:
                overrides = ["data=sample_conversation", f"seed={seed}", f"evaluator.simulator.seed={sim}"]
                verdicts = {s: dict.fromkeys(RUBRIC, score(s, seed, sim, judge)) for s in scenarios}
                job(sweep, f"{num}", [*overrides, f"judge.model={judge}"], verdicts)
                num += 1


def run(sweep: Path, *args: str, capsys) -> tuple[int, str, str]:
    code = main([str(sweep), "--n-resamples", "50", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_a_judge_offset_lands_in_the_judge_and_the_scenario_in_the_scenario(tmp_path, capsys):
    """Scores scenario a 2, b 3, c 4, judge y one point above x, nothing else: all variance is the scenario's and
    the judge's, by hand: sigma2_scenario = var(2, 3, 4) = 1; sigma2_judge = var(0, 1) = 1/2 (sample variances)."""
    crossed_sweep(tmp_path, lambda s, seed, sim, judge: {"a": 2, "b": 3, "c": 4}[s] + (judge == "y"))
    code, out, _ = run(tmp_path, "--ci-width", "1.0", capsys=capsys)
    assert code == 0
    result = json.loads((tmp_path / "variance.json").read_text())
    assert result["design"]["factors"] == {"scenario": 3, "policy": 2, "simulator": 2, "judge": 2}
    assert result["design"]["one_level"] == {}
    sources = {s["source"]: s for s in result["sources"]}
    assert sources["scenario"]["variance"] == pytest.approx(1.0)
    assert sources["judge"]["variance"] == pytest.approx(0.5)
    assert sources["policy"]["variance"] == pytest.approx(0, abs=1e-12)
    assert sources["residual"]["variance"] == pytest.approx(0, abs=1e-12)
    assert sources["judge"]["share"] == pytest.approx(1 / 3)
    # one seed of each, j judges, n scenarios: var(mean) = 1/n + 0.5/j; a width 1.0 at 95% (z = 1.959964): var <=
    # (1 / 3.919928)^2 = 0.0650794: unreachable with 1-7 judges (0.5/7 = 0.0714), with 8: 1 / (0.0650794 - 0.0625)
    # = 387.68 -> 388 scenarios; the narrowest width with 8 judges 3.919928 * sqrt(0.0625) = 0.97998
    rows = result["sample_size"]["by_judges"]
    assert [r["scenarios"] for r in rows] == [None] * 5 and result["sample_size"]["fewest_judges"] is None
    code, _, _ = run(tmp_path, "--ci-width", "1.0", "--max-judges", "8", capsys=capsys)
    rows = json.loads((tmp_path / "variance.json").read_text())["sample_size"]["by_judges"]
    assert rows[-1] == {
        "judges": 8,
        "scenarios": 388,
        "sessions": 388,
        "narrowest_width": pytest.approx(0.97998, abs=1e-5),
    }
    report = (tmp_path / "variance.md").read_text()
    assert "| judge | 0.5000 |" in report and "truncated at 0" in report and "bootstrap over scenarios" in report
    assert "variance by source:" in out


def test_a_source_with_one_level_is_left_out_and_named(tmp_path, capsys):
    crossed_sweep(tmp_path, lambda s, seed, sim, judge: {"a": 1, "b": 3, "c": 4}[s] + seed, judges=("x",))
    code, _, _ = run(tmp_path, capsys=capsys)
    result = json.loads((tmp_path / "variance.json").read_text())
    assert code == 0 and result["design"]["one_level"] == {"judge": "judge.model=x"}
    assert [t["term"] for t in result["terms"]][-1] == "scenario x policy x simulator"
    sources = {s["source"]: s for s in result["sources"]}
    assert list(sources) == ["scenario", "policy", "simulator", "interactions of sources", "residual"]
    assert sources["interactions of sources"]["terms"] == ["policy x simulator"]
    assert sources["policy"]["variance"] == pytest.approx(0.5)  # seeds 1, 2 add 1, 2: var(1, 2) = 1/2
    assert [r["judges"] for r in result["sample_size"]["by_judges"]] == [1]


def test_an_unjudged_session_is_refused_or_dropped_and_counted(tmp_path, capsys):
    def score(s, seed, sim, judge):
        return None if (s, seed, sim, judge) == ("b", 2, 1, "y") else {"a": 1, "b": 2, "c": 5}[s]

    crossed_sweep(tmp_path, score)
    code, _, err = run(tmp_path, capsys=capsys)
    assert code == 1
    assert re.search(r"1 of 3 scenarios lack a score in some run \(b: not judged in .*/5/scores\.jsonl", err)
    assert "--drop-incomplete" in err and not (tmp_path / "variance.json").exists()
    code, _, _ = run(tmp_path, "--drop-incomplete", capsys=capsys)
    result = json.loads((tmp_path / "variance.json").read_text())
    assert code == 0 and result["design"]["factors"]["scenario"] == 2
    assert list(result["design"]["scenarios_dropped"]) == ["b"]
    assert "Left out (--drop-incomplete): 1 scenarios" in (tmp_path / "variance.md").read_text()


def test_a_missing_cell_a_failed_job_and_a_stray_override_are_named(tmp_path, capsys):
    crossed_sweep(tmp_path, lambda s, seed, sim, judge: 3)
    cells = tmp_path / "cells"
    crossed_sweep(cells, lambda s, seed, sim, judge: 3)
    for file in (cells / "7").rglob("*"):
        file.unlink() if file.is_file() else None
    (cells / "7" / ".hydra").rmdir()
    code, _, err = run(cells, capsys=capsys)
    assert code == 1 and "no job for the cell policy seed=2, simulator evaluator.simulator.seed=2" in err
    (cells / "7").rmdir()
    job(cells, "7", ["data=sample_conversation", "seed=2", "evaluator.simulator.seed=2", "judge.model=y"], None, False)
    (cells / "7" / "error.txt").write_text("Traceback ...\nConfigError: judge.model: refused")
    code, _, err = run(cells, capsys=capsys)
    assert code == 1 and "1 of 8 jobs have no results" in err and "7: ConfigError: judge.model: refused" in err
    stray = tmp_path / "stray"
    crossed_sweep(stray, lambda s, seed, sim, judge: 3)
    overrides = stray / "3" / ".hydra" / "overrides.yaml"
    overrides.write_text(overrides.read_text().replace("data=sample_conversation", "data=conversation"))
    code, _, err = run(stray, capsys=capsys)
    assert code == 1 and "jobs 0 and 3 differ in overrides that are no source" in err


@pytest.mark.parametrize(
    ("damage", "named"),
    [
        (
            lambda f: (f / "scores.jsonl").write_text('{"id": "a", "verdicts"\n'),
            r"2/scores\.jsonl: record 1: .*not JSON",
        ),
        (lambda f: (f / "scores.jsonl").unlink(), r"2/scores\.jsonl: missing"),
        (lambda f: (f / "metrics.json").write_text("{"), r"2/metrics\.json: record run: .*not JSON"),
        (
            lambda f: (f / "scores.jsonl").write_text('{"id": "a", "verdicts": {"character_consistency": "high"}}\n'),
            r"2/scores\.jsonl: record 1: field 'verdicts\.character_consistency': a number or null, got 'high'",
        ),
        (
            lambda f: (f / "metrics.json").write_text('{"evaluator": "rolebench"}'),
            r"2/metrics\.json: record run: field 'evaluator': a conversation run, got 'rolebench'",
        ),
    ],
)
def test_a_malformed_run_file_is_named(tmp_path, capsys, damage, named):
    crossed_sweep(tmp_path, lambda s, seed, sim, judge: 3)
    damage(tmp_path / "2")
    code, _, err = run(tmp_path, capsys=capsys)
    assert code == 1 and re.search(named, err), err


def test_a_dimension_is_read_alone_and_an_unknown_one_is_named(tmp_path, capsys):
    crossed_sweep(tmp_path, lambda s, seed, sim, judge: {"a": 2, "b": 3, "c": 4}[s] + (judge == "y"))
    code, _, _ = run(tmp_path, "--dimension", "persona_drift", capsys=capsys)
    assert code == 0 and json.loads((tmp_path / "variance.json").read_text())["dimension"] == "persona_drift"
    code, _, err = run(tmp_path, "--dimension", "humour", capsys=capsys)
    assert code == 1 and "field 'verdicts.humour': no such dimension" in err


# The real sweep: the evaluated model, the user simulator and two judges are one scripted endpoint on 127.0.0.1.
def words(*parts: object) -> int:
    return 1 + zlib.crc32(" ".join(map(str, parts)).encode()) % 8


def scripted(body: dict) -> str:
    """The policy (model m): a reply of 1-8 words set by the card, its seed and the user's last message; the user
    simulator (model sim): a message naming its seed; judges ``long`` and ``long_too``: every dimension
    1 + (the character's words) // 6, capped at 5; judge ``flat``: 1 whatever it reads."""
    text = body["messages"][-1]["content"]
    if body["model"] == "m":
        card = body["messages"][0]["content"]
        return " ".join(["aye"] * words(card, body["seed"], text))
    if body["model"] == "sim":
        return f"Go on (simulator seed {body['seed']})."
    score = 1
    if body["model"] != "flat":
        conversation = text.split("The conversation (the character's turns are numbered):", 1)[1]
        score = min(5, 1 + len(re.findall(r"\baye\b", conversation)) // 6)
    scores = dict.fromkeys(["character_consistency", "persona_drift", "knowledge_boundary"], score)
    rest = dict.fromkeys(["out_of_character", "engagement", "goal_progress"], score)
    return json.dumps({"scores": scores | rest, "breaks": []})


@pytest.mark.slow
def test_a_real_sweep_gives_a_length_judge_against_a_flat_one_the_judge_share(tmp_path, chat_stub, run_script, capsys):
    """12 conversation runs (python sweep.py): policy seeds 1, 2 x simulator seeds 1, 2 x judges long, long_too
    (the same rule), flat. With flat, the judge is the largest source; between long and long_too it has none."""
    with chat_stub(scripted) as stub:
        result = run_script(
            "sweep.py",
            "objective=none",
            "logger=none",
            "data=sample_conversation",
            "evaluator=conversation",
            "evaluator.backend=endpoint",
            f"evaluator.endpoint.base_url={stub.url}",
            "evaluator.endpoint.model=m",
            "evaluator.drift.enabled=false",
            "evaluator.simulator_checks=[]",  # the scripted user's replies would fail them: nothing judged
            "evaluator.max_turns=2",
            "evaluator.bootstrap.n_resamples=20",
            f"evaluator.simulator.base_url={stub.url}",
            "evaluator.simulator.model=sim",
            *stub_judge(stub.url),
            "judge.max_retries=0",
            f"paths.output_root={tmp_path}",
            "sweep_name=variance",
            "hydra.sweep.subdir=${hydra.job.num}",
            "evaluator.generation.seed=1,2",
            "evaluator.simulator.seed=1,2",
            "judge.model=long,long_too,flat",
        )
        simulator = [r for r in stub.requests if r["model"] == "sim"]
    assert result.returncode == 0, result.stderr[-3000:]
    assert {r["seed"] for r in simulator} == {1, 2}  # evaluator.simulator.seed reaches the simulator's requests
    sweep = tmp_path / "multirun" / "variance"
    assert main([str(sweep), "--n-resamples", "200"]) == 0
    both = json.loads((sweep / "variance.json").read_text())
    sources = {s["source"]: s for s in both["sources"]}
    assert both["design"]["factors"] == {"scenario": 6, "policy": 2, "simulator": 2, "judge": 3}
    assert sources["judge"]["variance"] > 0
    assert sources["judge"]["share"] == max(s["share"] for s in both["sources"]) and sources["judge"]["share"] > 0.5
    assert sources["judge"]["share_ci"][0] > 0.2  # the 95% bootstrap CI of its share: well above 0
    # the length judges alone: the same scores, no judge variance; the length shows as policy and simulator
    for job_folder in sweep.iterdir():
        if (job_folder / ".hydra").is_dir() and "judge.model=flat" in (
            job_folder / ".hydra/overrides.yaml"
        ).read_text():
            (job_folder / ".hydra" / "overrides.yaml").unlink()
    assert main([str(sweep), "--n-resamples", "200"]) == 0
    alike = {s["source"]: s for s in json.loads((sweep / "variance.json").read_text())["sources"]}
    assert alike["judge"]["variance"] == pytest.approx(0, abs=1e-12) and alike["judge"]["share_ci"][1] < 1e-9
    assert (
        alike["policy"]["variance"] + alike["scenario"]["variance"] + alike["interactions of sources"]["variance"] > 0
    )
    capsys.readouterr()


def test_the_rpbench_command_runs_it(tmp_path, capsys):
    from rpbench.cli.commands import main as rpbench

    crossed_sweep(tmp_path, lambda s, seed, sim, judge: {"a": 2, "b": 3, "c": 4}[s] + (judge == "y"))
    with pytest.raises(SystemExit) as done:
        rpbench(["variance", str(tmp_path), "--n-resamples", "20"])
    assert done.value.code == 0 and (tmp_path / "variance.md").read_text().startswith("# Variance by source:")
    with pytest.raises(SystemExit) as done:
        rpbench(["variance", str(tmp_path / "nothing")])
    assert done.value.code == 1 and "no job folders" in capsys.readouterr().err
