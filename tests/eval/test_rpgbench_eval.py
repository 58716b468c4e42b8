"""RPGBench evaluation glue: WinRate against a real local server with scripted verdicts, the analysis'
split / reasoning / EMI helpers and the report's WinRate drops by hand, and the whole
``evaluator=rpgbench`` run on the bundled sample with a local judge."""

from __future__ import annotations

import json
import math
import re

import pytest

from rpbench.data.records import EvalExample, Turn, generated_reply
from rpbench.eval.benchmarks.rpgbench.report import js_severity, winrate_drops
from rpbench.eval.generalization.analysis import split_by_category
from rpbench.scoring.judge.winrate import REASK, judge_winrate, parse_choice
from rpbench.serve.model import load_served_model
from rpbench.serve.running import serve_in_thread


@pytest.fixture(scope="module")
def verdict_tokens(group_values):
    """The reply length of evaluator=rpgbench's judge (the WinRate choice)."""
    return group_values("evaluator", "rpgbench", "evaluator")["judge_max_tokens"]


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
VERDICTS = {
    REASK: "hard to say",
    "## Response A\nGOOD": "A",
    "## Response B\nGOOD": "B",
    "LEFTY": "Answer: A",
    "MUDDLED": "both are fine",
}
RECORDS = [  # (record, model prediction)
    (example("r1", "in_distribution", "plain golden"), "GOOD reply"),
    (example("r2", "user", "GOOD golden"), "meh reply"),
    (example("r3", "user", "plain golden"), "MUDDLED reply"),
    (example("r4", "user", "LEFTY golden"), "other reply"),
]


def test_winrate_over_two_judges_and_both_orders(tmp_path, scripted, judge_config, verdict_tokens):
    examples = [e for e, _ in RECORDS]
    predictions = {e.id: p for e, p in RECORDS}
    with serve_in_thread(load_served_model("tiny-qwen2"), make_server=scripted(replies=VERDICTS)) as server:
        judge = judge_config(model=server.model_name, base_url=server.base_url, parse_tries=3)
        result = judge_winrate(examples, predictions, [judge, judge], verdict_tokens)
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
    assert result["by_shift"]["user"] == {
        "winrate": 0.25,
        "n_judges": 2,
        "judged": 8,
        "no_verdict": 4,
        "n": 12,
        "excluded_empty_predictions": 0,
    }
    r4 = [r for r in result["records"] if r["id"] == "r4"]
    assert [(r["model_first"], r["model_won"]) for r in r4[:2]] == [(True, 1.0), (False, 0.0)]
    assert {r["status"] for r in result["records"] if r["id"] == "r3"} == {"parse_failure"}


def test_winrate_needs_a_prediction_for_every_record(judge_config, verdict_tokens):
    with pytest.raises(ValueError, match="1 test records have no prediction"):
        judge_winrate([RECORDS[0][0]], {}, [judge_config(model="x", base_url="http://127.0.0.1:9/v1")], verdict_tokens)


def test_categories_put_idtest_first_and_need_a_shifted_one():
    examples = [example("a", "user", "g"), example("b", "in_distribution", "g"), example("c", "character", "g")]
    assert split_by_category(examples) == {"IDTest": [1], "user-tag": [0], "character-tag": [2]}
    with pytest.raises(ValueError, match=r"needs IDTest records and shifted ones, got \['user-tag'\]"):
        split_by_category(examples[:1])


@pytest.mark.parametrize(
    "prediction, scored, how",
    [
        ("Hello there.", "Hello there.", "plain"),
        ("<think>\nthe user is sad\n</think>\n\nHello there.", "Hello there.", "stripped"),
        ("<think>\na</think>b</think> Hi", "Hi", "stripped"),  # the last closing tag ends the reasoning
        ("<think>\nthe user is sad, so", "", "unclosed"),
    ],
)
def test_think_blocks_are_stripped_before_scoring_and_unclosed_ones_counted(prediction, scored, how):
    assert generated_reply(prediction) == (scored, how)


def test_winrate_drop_per_category_by_hand():
    results = {
        "winrate": {
            "by_category": {"IDTest": {"winrate": 0.6}, "german": {"winrate": 0.45}, "Gaming": {"winrate": None}}
        }
    }
    assert winrate_drops(results) == pytest.approx({"german": 0.15})
    assert js_severity({"user": 0.1, "character": 0.2, "dialogue": 0.3}) == pytest.approx(0.6)


@pytest.mark.slow
def refused_before_loading(compose, *overrides: str) -> str:
    """``pipeline.run`` on the composed config: the ConfigError it stops with before any model loads."""
    from omegaconf import open_dict

    from rpbench.core.errors import ConfigError
    from rpbench.pipeline import run
    from rpbench.validate import validate

    cfg = compose("objective=none", "data=sample_rpgbench", *overrides)
    with open_dict(cfg):
        del cfg["hydra"]
    with pytest.raises(ConfigError) as error:
        run(validate(cfg))
    return str(error.value)


@pytest.mark.parametrize(
    ("splits", "named"),
    [
        ("[IDTest]", "data.test_splits=['IDTest']: the R-EMID analysis"),
        ("[OOD1Test]", "the in-distribution split IDTest"),
    ],
)
def test_the_analysis_needs_the_id_split_and_a_shifted_one_configured(compose, splits, named):
    from rpbench.core.errors import ConfigError
    from rpbench.validate import validate

    with pytest.raises(ConfigError, match=re.escape(named)):
        validate(compose("objective=none", "data=sample_rpgbench", f"data.test_splits={splits}"))


def test_a_reasoner_whose_context_the_thoughts_would_fill_is_refused_at_startup(compose):
    """The sample's tiny estimator pair has 2048 positions: the paper's 2048-token thoughts would fill them (seen
    after generating and judging, with SmolLM2 as the evaluated model); the sample's own length fits."""
    from rpbench.core.errors import ConfigError
    from rpbench.validate import validate

    long = "evaluator.generalization.reasoning.max_new_tokens=2048"
    with pytest.raises(ConfigError, match=re.escape(f"{long}: model tiny-qwen3 has a context of 2048 tokens")):
        validate(compose("objective=none", "data=sample_rpgbench", long))
    # with a real evaluated model (no tiny tuning), the sample's own: short, sampled thoughts (greedy, its random
    # reasoner wrote whitespace for all 8 records); the real data's, the paper's: 2048 tokens, greedy
    sample = validate(compose("objective=none", "data=sample_rpgbench", "model=smollm2-135m-instruct"))
    reasoning = sample.evaluator.generalization.reasoning
    assert (reasoning.max_new_tokens, reasoning.temperature) == (64, 1.0)
    for decoding in ("authors_own_template", "plain"):
        real = compose("objective=none", "data=rpgbench", "model=qwen3-8b", f"evaluator/decoding={decoding}")
        assert (
            real.evaluator.generalization.reasoning.max_new_tokens,
            real.evaluator.generalization.reasoning.temperature,
        ) == (2048, 0.0)


def test_the_analysis_needs_idtest_and_shifted_records_in_the_data_before_generating(compose, tmp_path):
    """The file has the splits, but no IDTest record and one German one: named with the file and split when
    the records are read, before any model loads (the analysis would fail after generating)."""
    from rpbench.data.files import package_path

    sample = json.loads(package_path("pkg://rpbench/resources/sample/rpgbench/rpgbench.json").read_text())
    data = tmp_path / "rpgbench.json"
    data.write_text(json.dumps({**sample, "IDTest": [], "OOD1Test": sample["OOD1Test"][:1]}))
    message = refused_before_loading(compose, f"data.files.test={data}", "data.test_splits=[IDTest,OOD1Test]")
    assert f"data.files.test={data}: the R-EMID analysis" in message
    assert "no IDTest records (split IDTest); 1 german record (split OOD1Test)" in message


@pytest.mark.slow
def test_rpgbench_evaluation_on_the_sample_with_a_local_judge_ensemble(tmp_path, run_in_process, caplog):
    """What run.py runs, in-process: per category, the sample's tiny critic and reasoner (not the evaluated model)."""
    import logging

    from rpbench.pipeline import RunFailed

    run_dir = tmp_path / "run"
    # the tiny judges' replies do not parse: no WinRate, so the run is marked failed (the analysis is written)
    with (
        caplog.at_level(logging.INFO, logger="rpbench.pipeline"),
        pytest.raises(RunFailed, match=r"its headline \(WinRate\) has no value"),
    ):
        run_in_process(
            run_dir,
            "objective=none",
            "evaluator=rpgbench",
            "evaluator/decoding=authors",  # every prompt in ChatML (the default: each model's own template)
            "data=sample_rpgbench",
            "judge=local",
            "judge.parse_tries=1",  # the tiny judge's replies rarely parse: no re-asks (those: the judge's own tests)
            "evaluator.generalization.convergence_repeats=1",
            "evaluator.generalization.entropy.samples=2",
            "evaluator.generalization.entropy.max_prompts=1",
            "evaluator.generalization.entropy.max_new_tokens=8",
            "evaluator.generalization.reasoning.max_new_tokens=8",
            "evaluator.generation.max_new_tokens=16",
            "+evaluator.judges=[{},{}]",
            f"paths.output_root={tmp_path}",
        )
    ev = json.loads((run_dir / "metrics.json").read_text())["eval"]
    records = {
        json.loads(line)["meta"]["category"] for line in (run_dir / "predictions.jsonl").read_text().splitlines()
    }
    shifted = records - {"IDTest"}
    assert len(shifted) == 11 and set(ev["jsd"]) == set(ev["bound"]) == set(ev["r_emid"]) == shifted
    assert set(ev["emi_critic_without_r"]) == set(ev["r_emi"]) == set(ev["perplexity"]) == records
    assert "emi" not in ev  # no plain critic: the paper's naive EMI is not claimed
    g = ev["generalization"]
    assert g["critic"] == "model=tiny-qwen3" and not g["critic_is_evaluated_model"]
    # WinRate and R-EMI judge the same records: the empty replies each leaves out are the same
    for category, entry in ev["r_emi"].items():
        assert (
            ev["winrate"]["by_category"][category]["excluded_empty_predictions"] == entry["excluded_empty_predictions"]
        )
    assert g["reasoning_source"].startswith("the reasoner (model=tiny-qwen3)")
    assert g["reasoning_source"].endswith("repetition penalty 1.05, chat template chatml")
    assert set(ev["prompts"]) >= {"policy_system", "policy_user", "pxy_user", "thought_user"}
    provenance = g["provenance"]  # what the multi-run summary compares across runs
    assert provenance["critic"] == {
        "description": "model=tiny-qwen3",
        "weights_sha256": None,
        "is_evaluated_model": False,
        "adapters": [],
    }
    assert "plain_critic" not in provenance
    assert provenance["prompts"] == {name: p["sha256"] for name, p in ev["prompts"].items()}
    assert provenance["encoder"]["encoder"] == g["embedder"]["encoder"]  # the sample chooses the fallback
    assert provenance["encoder"]["fallback_used"] == (g["embedder"]["fallback_reason"] is not None)
    assert provenance["analysis"]["reasoning"]["max_new_tokens"] == 8 and "batch_size" not in provenance["analysis"]
    assert set(ev["winrate"]["by_shift_mean_of_categories"]) == set(ev["winrate"]["by_shift"])
    assert all(p["origin"] == "rpbench" and len(p["sha256"]) == 64 for p in ev["prompts"].values())
    # two judges, both orders, every record: judged + no verdict = all, none scored as a loss by default
    w = ev["winrate"]
    assert len(w["per_judge"]) == 2
    for shift_tag in shifted:
        j, b = ev["jsd"][shift_tag], ev["bound"][shift_tag]
        assert all(-1e-9 <= j[k] <= math.log(2) + 1e-9 for k in ("user", "character", "dialogue", "delta_p", "delta_q"))
        roots = sum(math.sqrt(max(j[k], 0)) for k in ("user", "character", "dialogue"))
        # Theorem 3.4 (Δ = δ_P + δ_Q) with Ĥ estimated, and the EMID code's bound beside it
        h_hat = ev["entropy"]["h_hat"][shift_tag]
        assert ev["entropy"]["h_hat_mean"][shift_tag] <= h_hat + 1e-9
        assert ev["entropy"]["h_hat_quantile"][shift_tag] <= h_hat + 1e-9
        theorem = math.sqrt(2 / 3) * h_hat * roots + 8 * (max(j["delta_p"], 0) + max(j["delta_q"], 0)) ** 0.25
        assert b["value"] == pytest.approx(theorem) and b["delta_form"] == "sum" and b["entropy_form"] == "estimated"
        code = roots + max(j["delta_p"], 0) ** 0.25 + max(j["delta_q"], 0) ** 0.25
        assert ev["bound_emid_code"][shift_tag] == pytest.approx(code)
        assert ev["r_emid"][shift_tag] == pytest.approx(ev["r_emi"]["IDTest"]["emi"] - ev["r_emi"][shift_tag]["emi"])
        points = g["convergence"]["points"][shift_tag]
        assert points[-1]["n"] == min(g["n_per_category"][c] for c in ("IDTest", shift_tag))
    user = [c for c in shifted if ev["by_shift"]["user"]["categories"].count(c)]
    assert len(user) == 5 and ev["by_shift"]["user"]["r_emid"] == pytest.approx(
        sum(ev["r_emid"][c] for c in user) / len(user)
    )
    drawn = [json.loads(line)["id"] for line in (run_dir / "entropy_samples.jsonl").read_text().splitlines()]
    assert len(drawn) == 2 * len(records)  # one prompt per category, two samples each
    assert (run_dir / "reasoning.jsonl").is_file() and (run_dir / "critic_samples.jsonl").is_file()
    # the console: no headline (the run failed), and what it did measure, R-EMID per shift type with its n
    console = [r.getMessage() for r in caplog.records if r.name == "rpbench.pipeline"]
    assert "headline (rpgbench): none (the evaluation failed)" in console
    shifted_types = [s for s in ev["by_shift"] if "r_emid" in ev["by_shift"][s]]  # in_distribution has none
    expected = ", ".join(f"{s} {ev['by_shift'][s]['r_emid']:.4f} (n={ev['by_shift'][s]['n']})" for s in shifted_types)
    assert f"R-EMID by shift type: {expected} (point estimates: no CI computed; per category in report.md)" in console
    report = (run_dir / "report.md").read_text()
    assert "### Generalization (R-EMID paper), per category" in report and "Per shift type" in report
    assert "Theorem 3.4" in report and "EMID code's scale-adjusted bound" in report
