"""The parse-failure warning's threshold, by hand."""

from rpbench.scoring.chat.health import parse_failure_warning


def test_warns_only_above_the_limit():
    assert parse_failure_warning(2, 10, 0.2) is None  # 20% is not above 20%
    warning = parse_failure_warning(3, 10, 0.2)
    assert warning is not None and "3 of 10" in warning and "30%" in warning
    assert parse_failure_warning(0, 0, 0.2) is None  # nothing judged: nothing to warn about


def test_a_judge_that_fails_every_request_fails_the_run_and_is_never_ranked(
    tmp_path, caplog, chat_stub, run_in_process
):
    """Every judge request answered 500: the warning is on the console, in metrics.json (``eval.endpoints.judge``,
    ``warnings``) and report.md; the run stops with RunFailed, metrics.json marked ``failed``, and the
    leaderboard skips it."""
    import json
    import logging

    import pytest

    from rpbench.leaderboard import build
    from rpbench.pipeline import RunFailed

    with chat_stub(lambda body: 500) as judge:
        with (
            caplog.at_level(logging.WARNING),
            pytest.raises(RunFailed, match=r"every request of judge \((\d+) of \1\) failed"),
        ):
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
    results = json.loads((tmp_path / "run" / "metrics.json").read_text())
    judged = results["eval"]["judge"]
    n = judged["overall"]["n"]
    assert n > 0 and judged["overall"]["request_failures"] == n
    health = results["eval"]["endpoints"]["judge"]
    assert len(judge.requests) == health["requests"] == health["failures"] == n
    assert (
        health["rate"] == 1.0 and health["threshold"] == 0.0 and health["setting"] == "judge.warn_request_failure_rate"
    )
    assert f"judge: {n} of {n} judge requests got no usable reply" in health["warning"]
    assert results["warnings"] == [health["warning"]] and "rest on nothing" in results["failed"]
    assert any(health["warning"] in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    report = (tmp_path / "run" / "report.md").read_text()
    assert health["warning"] in report and results["failed"] in report
    assert [why for _, why in build([tmp_path]).skipped] == [f"failed: {results['failed']}"]
