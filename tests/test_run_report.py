"""The console's closing lines: a benchmark's headline (or why there is none) and the numbers it reports beside
it, and none for a failed evaluation."""

from __future__ import annotations

import logging

import pytest

from rpbench.run_report import headline

JUDGED = {"overall": {"accuracy": 0.0, "n": 10, "judged": 0, "parse_failures": 10, "request_failures": 0}}


def test_the_headline_is_the_benchmark_s_first_held_number_with_its_ci():
    results = {
        "evaluator": "rolemrc",
        "eval": {"judge": {"overall": {**JUDGED["overall"], "accuracy": 0.75, "judged": 10, "parse_failures": 0}}},
    }
    results["eval"]["judge"]["overall"] |= {"ci_low": 0.5, "ci_high": 0.9}
    assert "headline (rolemrc): judge accuracy 0.7500 [0.5000, 0.9000]" in headline(results)


def test_a_failed_evaluation_shows_no_headline_although_its_results_hold_a_number():
    """Unparsed verdicts count as wrong (the paper's rule): accuracy 0.0 is held, and is no headline."""
    results = {"evaluator": "rolemrc", "eval": {"judge": JUDGED}, "failed": "evaluator=rolemrc: no verdict"}
    lines = headline(results)
    assert "headline (rolemrc): none (the evaluation failed)" in lines
    assert not any(line.startswith("headline (rolemrc): judge accuracy") for line in lines)


def test_rpgbench_prints_winrate_and_r_emid_per_shift_type_with_their_counts():
    winrate = {"winrate": 0.4, "n_judges": 2, "judged": 36, "no_verdict": 4, "n": 40}
    results = {
        "evaluator": "rpgbench",
        "eval": {
            "winrate": {
                "overall": {**winrate, "parse_failures": 4, "request_failures": 0},
                "by_shift": {
                    "in_distribution": {"winrate": 0.5},
                    "user": {"winrate": 0.25},
                    "character": {"winrate": None},
                },
            },
            "by_shift": {
                "in_distribution": {"categories": ["IDTest"], "n": 6, "r_emi": 0.01},
                "user": {"categories": ["german", "spanish"], "n": 6, "r_emi": 0.02, "r_emid": -0.0125},
                "character": {"categories": ["Theater"], "n": 3, "r_emi": 0.0, "r_emid": 0.01},
            },
        },
    }
    lines = headline(results)
    assert "headline (rpgbench): WinRate 0.4000" in lines
    assert (
        "WinRate by shift type: in_distribution 0.5000, user 0.2500, character – (36 of 40 verdicts, 2 judge(s); "
        "no CI computed)" in lines
    )
    assert (
        "R-EMID by shift type: user -0.0125 (n=6), character 0.0100 (n=3) (point estimates: no CI computed; "
        "per category in report.md)" in lines
    )


def test_without_a_judge_or_an_analysis_the_console_says_why_rpgbench_has_no_number():
    lines = headline({"evaluator": "rpgbench", "eval": {"metrics": {"overall": {}}}})
    assert "headline (rpgbench): none (WinRate needs a judge: judge=<backend>)" in lines
    assert "R-EMID: none (evaluator.generalization.enabled=false)" in lines


def test_a_run_that_evaluates_nothing_says_so():
    assert headline({"evaluator": "none"}) == ["headline: none (evaluator=none: no benchmark ran)"]


@pytest.mark.slow
def test_an_evaluation_only_shift_run_prints_why_it_has_no_headline_and_its_distances(tmp_path, run_in_process, caplog):
    """The console of `python run.py objective=none evaluator=shift` (no model): it used to end with
    `headline (shift): none` and nothing it measured."""
    with caplog.at_level(logging.INFO, logger="rpbench.pipeline"):
        run_in_process(
            tmp_path / "run",
            "objective=none",
            "data=sample_rpgbench",
            "evaluator=shift",
            "evaluator.generalization.encoder=null",  # the packaged encoder: nothing to download
        )
    console = [r.getMessage() for r in caplog.records if r.name == "rpbench.pipeline"]
    assert "headline (shift): none (it measures how far data splits are apart; no model is scored)" in console
    [distances] = [line for line in console if line.startswith("JSD train vs test, all records")]
    assert distances.startswith("JSD train vs test, all records (equal weighting): user ")
    assert ", character " in distances and ", dialogue " in distances
