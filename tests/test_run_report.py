"""The console's closing lines: a benchmark's headline, and none for a failed evaluation."""

from __future__ import annotations

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
