"""Every judged evaluator warns, and fails the run, the same way when none of its judge's replies parse."""

from __future__ import annotations

import json

import pytest

from rpbench.pipeline import RunFailed

UNREADABLE = "~~ nothing a rubric can read ~~"

JUDGED = {
    "rolemrc": ["data=sample", "data.max_test_samples=2"],
    # the scripted user's one reply would fail the simulator checks (then no session is judged)
    "conversation": ["data=sample_conversation", "evaluator.drift.enabled=false", "evaluator.simulator_checks=[]"],
    "characterllm": ["data=sample_characterllm"],
    "rpgbench": ["data=sample_rpgbench", "data.max_test_samples=2", "evaluator.generalization.enabled=false"],
}


@pytest.mark.slow
@pytest.mark.parametrize("evaluator", sorted(JUDGED))
def test_a_judge_whose_replies_never_parse_is_warned_about_and_fails_the_run(
    tmp_path, evaluator, caplog, chat_stub, run_in_process
):
    out = tmp_path / "run"
    with chat_stub(lambda body: UNREADABLE) as stub:
        endpoint = [
            f"judge.base_url={stub.url}",
            "evaluator.backend=endpoint",
            f"evaluator.endpoint.base_url={stub.url}",
        ]
        with pytest.raises(RunFailed, match="rest on nothing"):
            run_in_process(
                out,
                "objective=none",
                "logger=none",
                f"evaluator={evaluator}",
                *JUDGED[evaluator],
                "evaluator.generation.max_new_tokens=4",
                "judge=openai",
                "judge.api_key_env=null",
                "judge.cache_path=null",
                "judge.progress=false",
                "judge.max_retries=0",
                "judge.parse_tries=1",
                *endpoint,
                "evaluator.endpoint.model=m",
            )
    results = json.loads((out / "metrics.json").read_text())
    tally = results["eval"]["judge_tally"]
    assert tally["n"] > 0 and tally["parse_failures"] == tally["n"] and tally["request_failures"] == 0
    warning = results["eval"]["judge_warning"]
    assert f"could not be parsed for {tally['n']} of {tally['n']} judgements (100%" in warning
    assert warning in results["warnings"] and warning in caplog.text
    assert f"none of the {tally['n']} judgements gave a verdict" in results["failed"]
    assert warning in (out / "report.md").read_text()
