"""RPGBench evaluation glue: WinRate against a real local server with scripted verdicts, the analysis'
split / reasoning / EMI helpers and the report's WinRate drops by hand, and the whole
``evaluator=rpgbench`` run on the bundled sample with a local judge."""

from __future__ import annotations

import json
import math

import pytest
import torch

from conftest import run_in_process
from rpbench.data.records import EvalExample, Turn
from rpbench.eval.benchmarks.rpgbench_report import js_severity, winrate_drops
from rpbench.eval.generalization.analysis import emi_from, record_reasoning, split_by_shift
from rpbench.scoring.judge.winrate import REASK, judge_winrate, parse_choice
from rpbench.serve import load_served_model, serve_in_thread


def example(rid: str, shift: str, golden: str, **meta) -> EvalExample:
    prompt = (Turn("system", "You are Greta, an innkeeper."), Turn("user", "Any rooms free tonight?"))
    category = "IDTest" if shift == "in_distribution" else f"{shift}-tag"
    judged = {
        "category": category,
        "persona": "A tired traveller.",
        "character": {"name": "Greta", "occupation": "innkeeper"},
        "dialogue": [{"role": "user", "content": "Any rooms free tonight?"}],
    }
    return EvalExample(rid, prompt, golden, "tag", {"shift": shift, **judged, **meta})


@pytest.mark.parametrize(
    "reply, expected",
    [
        ("A", "A"),
        ("b", "B"),
        ("**B**", "B"),
        ("Answer: A", "A"),
        ("(A).", "A"),
        ("A or B", None),
        ("", None),
        ("AB", None),
    ],
)
def test_choice_parsing_is_strict(reply, expected):
    assert parse_choice(reply) == expected


# The scripted judge prefers the response holding GOOD, whichever position it is in; LEFTY makes it
# always answer A (position bias); MUDDLED gets unreadable replies, re-asked until parse_tries.
VERDICTS = [
    {"match": REASK, "reply": "hard to say"},
    {"match": "## Response A\nGOOD", "reply": "A"},
    {"match": "## Response B\nGOOD", "reply": "B"},
    {"match": "LEFTY", "reply": "Answer: A"},
    {"match": "MUDDLED", "reply": "both are fine"},
]
RECORDS = [  # (record, model prediction)
    (example("r1", "in_distribution", "plain golden"), "GOOD reply"),
    (example("r2", "user", "GOOD golden"), "meh reply"),
    (example("r3", "user", "plain golden"), "MUDDLED reply"),
    (example("r4", "user", "LEFTY golden"), "other reply"),
]


def test_winrate_over_two_judges_and_both_orders(tmp_path):
    examples = [e for e, _ in RECORDS]
    predictions = {e.id: p for e, p in RECORDS}
    with serve_in_thread(load_served_model("tiny-qwen2"), {"scripted": VERDICTS}) as server:
        judge = {
            "backend": "openai",
            "model": server.model_name,
            "base_url": server.base_url,
            "api_key_env": None,
            "progress": False,
            "parse_tries": 3,
            "max_tokens": {"rpgbench": 8},
        }
        result = judge_winrate(examples, predictions, [judge, judge])
        # per judge: 8 judgements, then 2 re-asks of each of r3's two orders
        assert server.stats.requests == 2 * (8 + 4)
    # r1 wins both orders, r2 loses both, r3 has no verdict, r4 wins only when the model is A
    for judged in result["per_judge"].values():
        tally = judged["overall"]
        assert {k: tally[k] for k in ("n", "judged", "wins", "no_verdict", "winrate", "parse_failures")} == {
            "n": 8,
            "judged": 6,
            "wins": 3.0,
            "no_verdict": 2,
            "winrate": 0.5,
            "parse_failures": 2,
        }
        assert judged["by_shift"]["user"] == {"n": 6, "judged": 4, "wins": 1.0, "no_verdict": 2, "winrate": 0.25}
    assert result["overall"]["winrate"] == 0.5 and result["overall"]["no_verdict"] == 4
    assert result["overall"]["judged"] == 12 and result["overall"]["parse_failures"] == 4
    assert result["by_shift"]["in_distribution"]["winrate"] == 1.0
    assert result["by_shift"]["user"] == {"winrate": 0.25, "n_judges": 2, "judged": 8, "no_verdict": 4, "n": 12}
    r4 = [r for r in result["records"] if r["id"] == "r4"]
    assert [(r["model_first"], r["model_won"]) for r in r4[:2]] == [(True, 1.0), (False, 0.0)]
    assert {r["status"] for r in result["records"] if r["id"] == "r3"} == {"parse_failure"}


def test_winrate_needs_a_prediction_for_every_record():
    with pytest.raises(ValueError, match="1 test records have no prediction"):
        judge_winrate([RECORDS[0][0]], {}, [{"model": "x"}])


def test_splits_put_in_distribution_first_and_need_a_shift():
    examples = [example("a", "user", "g"), example("b", "in_distribution", "g"), example("c", "character", "g")]
    assert split_by_shift(examples) == {"in_distribution": [1], "character": [2], "user": [0]}
    with pytest.raises(ValueError, match=r"needs in_distribution records and shifted ones, got \['user'\]"):
        split_by_shift([example("a", "user", "g")])


def test_reasoning_comes_from_every_record_or_none():
    with_r = [example("a", "user", "g", reasoning="warm"), example("b", "user", "g", reasoning="brief")]
    assert record_reasoning(with_r) == ["warm", "brief"]
    assert record_reasoning([example("a", "user", "g")]) is None
    with pytest.raises(ValueError, match=r"1 test records lack the 'reasoning' field others have \(first: \['c'\]\)"):
        record_reasoning([*with_r, example("c", "user", "g")])


def test_emi_from_matrices_by_hand():
    # 2 samples: the diagonal against both off-diagonal pairs (n_negatives >= 2 takes all)
    model = torch.tensor([[-1.0, -3.0], [-2.0, -0.5]], dtype=torch.float64)
    golden = torch.tensor([[-1.0, -1.5], [-1.5, -1.0]], dtype=torch.float64)
    result = emi_from(model, golden, n_negatives=10, seed=0)
    mi_model = (-1.0 - 0.5) / 2 - (-3.0 - 2.0) / 2  # 1.75
    mi_golden = (-1.0 - 1.0) / 2 - (-1.5 - 1.5) / 2  # 0.5
    assert result == pytest.approx({"emi": mi_model - mi_golden, "mi_model": mi_model, "mi_golden": mi_golden, "n": 2})


def test_winrate_drop_per_category_by_hand():
    results = {
        "winrate": {
            "by_category": {"IDTest": {"winrate": 0.6}, "german": {"winrate": 0.45}, "Gaming": {"winrate": None}}
        }
    }
    assert winrate_drops(results) == pytest.approx({"german": 0.15})
    assert js_severity({"user": 0.1, "character": 0.2, "dialogue": 0.3}) == pytest.approx(0.6)


@pytest.mark.slow
def test_rpgbench_evaluation_on_the_sample_with_a_local_judge_ensemble(tmp_path):
    """What run.py runs, in-process."""
    run_dir = tmp_path / "run"
    run_in_process(
        run_dir,
        "objective=none",
        "evaluator=rpgbench",
        "data=sample_rpgbench",
        "judge=local",
        "judge.parse_tries=1",  # the tiny judge's replies rarely parse: no re-asks (those: the judge's own tests)
        "evaluator.generalization.reasoning_generator=self",
        "evaluator.generalization.convergence_repeats=1",
        "evaluator.generalization.entropy.samples=2",
        "evaluator.generalization.entropy.max_prompts=2",
        "evaluator.generalization.entropy.max_new_tokens=16",
        "evaluator.generation.max_new_tokens=16",
        "+evaluator.judges=[{},{}]",
        f"paths.output_root={tmp_path}",
    )
    ev = json.loads((run_dir / "metrics.json").read_text())["eval"]
    shifts, ID = {"user", "character", "composition"}, "in_distribution"
    assert set(ev["jsd"]) == set(ev["bound"]) == set(ev["r_emid"]) == shifts
    assert set(ev["emi"]) == set(ev["r_emi"]) == set(ev["perplexity"]) == shifts | {"in_distribution"}
    # two judges, both orders, every record: judged + no verdict = all, none scored as a loss by default
    w = ev["winrate"]
    assert len(w["per_judge"]) == 2 and w["overall"]["n"] == 2 * 2 * ev["n_records"]
    assert w["overall"]["judged"] + w["overall"]["no_verdict"] == w["overall"]["n"]
    for shift in shifts:
        j, b = ev["jsd"][shift], ev["bound"][shift]
        assert all(-1e-9 <= j[k] <= math.log(2) + 1e-9 for k in ("user", "character", "dialogue", "delta_p", "delta_q"))
        by_hand = math.sqrt(2 / 3) * sum(math.sqrt(max(j[k], 0)) for k in ("user", "character", "dialogue"))
        by_hand += 8 * max(max(j["delta_p"], 0), max(j["delta_q"], 0)) ** 0.25
        assert b["value"] == pytest.approx(by_hand) and b["entropy_form"] == "scale_adjusted"
        assert ev["r_emid"][shift] == pytest.approx(ev["r_emi"]["in_distribution"]["emi"] - ev["r_emi"][shift]["emi"])
        assert ev["emid"][shift] == pytest.approx(ev["emi"]["in_distribution"]["emi"] - ev["emi"][shift]["emi"])
        # the estimated form: Ĥ = 2 x the largest per-prompt entropy of ID and the shift (critic = model)
        estimated, h = ev["bound_estimated"][shift], ev["entropy"]["per_split"]
        h_hat = 2 * max(h["in_distribution"]["max"], h[shift]["max"])
        assert estimated["entropy_form"] == "estimated" and ev["entropy"]["h_hat"][shift] == pytest.approx(h_hat)
        assert estimated["entropy"] == pytest.approx(h_hat) and h_hat > 0
        assert estimated["value"] == pytest.approx(h_hat * (by_hand - b["output_term"]) + b["output_term"])
        points = ev["generalization"]["convergence"]["points"][shift]
        assert points[-1]["n"] == min(ev["generalization"]["n_per_split"][s] for s in ("in_distribution", shift))
    for values in ev["perplexity"].values():
        assert set(values) == {"with_reasoning", "without_reasoning"} and all(v > 1 for v in values.values())
    assert {s: v["n_prompts"] for s, v in ev["entropy"]["per_split"].items()} == dict.fromkeys(shifts | {ID}, 2)
    drawn = [json.loads(line)["id"] for line in (run_dir / "entropy_samples.jsonl").read_text().splitlines()]
    assert len(drawn) == 2 * 2 * 4 and all(f"{d.rsplit('#', 1)[0]}#1" in drawn for d in drawn)
    assert ev["generalization"]["reasoning_source"] == "generated by the evaluated model"
    assert (run_dir / "reasoning.jsonl").is_file() and (run_dir / "bound_convergence.png").is_file()
    report = (run_dir / "report.md").read_text()
    assert "### WinRate vs golden responses" in report and "### Generalization (R-EMID paper)" in report
    assert "*bound (Ĥ = 1)* is scale_adjusted (Ĥ = 1), delta form max" in report
    assert "*bound (Ĥ estimated)* is estimated (Ĥ from 2 samples per prompt at temperature 1" in report
    lines = report.splitlines()
    header = next(k for k, line in enumerate(lines) if line.endswith("| bound (Ĥ = 1) | bound (Ĥ estimated) | Ĥ |"))
    row = next(line for line in lines[header:] if line.startswith("| user |"))
    assert row.endswith(
        f"| {ev['bound']['user']['value']:.4f} | {ev['bound_estimated']['user']['value']:.4f} | "
        f"{ev['entropy']['h_hat']['user']:.4f} |"
    )
