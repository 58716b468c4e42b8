"""The parse-failure warning's threshold, by hand."""

from rpbench.scoring.judge.health import parse_failure_warning


def test_warns_only_above_the_limit():
    assert parse_failure_warning(2, 10, 0.2) is None  # 20% is not above 20%
    warning = parse_failure_warning(3, 10, 0.2)
    assert warning is not None and "3 of 10" in warning and "30%" in warning
    assert parse_failure_warning(0, 0, 0.2) is None  # nothing judged: nothing to warn about


def test_request_failures_warn_above_their_limit():
    from rpbench.scoring.judge.health import request_failure_warning

    assert request_failure_warning(0, 10, 0.0) is None
    warning = request_failure_warning(10, 10, 0.0)  # a judge that failed every request
    assert warning is not None and "10 of 10" in warning and "100%" in warning
    assert request_failure_warning(1, 10, 0.1) is None and request_failure_warning(2, 10, 0.1) is not None


def test_a_judge_that_fails_every_request_is_reported_on_the_console_and_in_the_results(tmp_path, caplog):
    import json
    import logging

    from conftest import chat_stub, run_in_process

    with chat_stub(lambda body: 500) as judge:
        with caplog.at_level(logging.WARNING):
            run_in_process(
                tmp_path / "run",
                "objective=none",
                "logger=none",
                "evaluator=rolemrc",
                "evaluator.metrics=[rougeL]",
                "evaluator.generation.max_new_tokens=2",
                "evaluator.bootstrap.n_resamples=10",
                "data.max_test_samples=2",
                "judge=openai",
                "judge.api_key_env=null",
                "judge.progress=false",
                "judge.max_retries=0",
                f"judge.cache_path={tmp_path / 'judge.sqlite'}",
                f"judge.base_url={judge.url}",
            )
    judged = json.loads((tmp_path / "run" / "metrics.json").read_text())["eval"]["judge"]
    n = judged["overall"]["n"]
    assert n > 0 and judged["overall"]["request_failures"] == n == len(judge.requests)
    assert f"no reply for {n} of {n} judgements" in judged["warning"]
    assert any(f"no reply for {n} of {n}" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert judged["warning"] in (tmp_path / "run" / "report.md").read_text()
