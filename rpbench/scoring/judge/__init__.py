"""LLM-as-a-judge: an OpenAI-compatible client (async, retried, cached), rubric prompts and strict parsers.

with open_judge(spec.judge, local_server) as client:   # RunSpec.judge; judge=local: the server handed in
    rolemrc = judge_rolemrc(examples, predictions, client)
    mmrole = judge_answers(answers_dir, client, reviews_dir)   # rpbench.eval.benchmarks.mmrole.judging
"""

from rpbench.scoring.judge.client import (
    JudgeClient,
    JudgeConfig,
    JudgeConfigError,
    JudgeOpener,
    JudgeRequest,
    JudgeResult,
    JudgeStats,
    LocalServer,
    ParsedReply,
    judge_opener,
    open_judge,
)
from rpbench.scoring.judge.parse import parse_score_pair, parse_verdict
from rpbench.scoring.judge.rolemrc_rubrics import RUBRICS, judge_rolemrc

__all__ = [
    "RUBRICS",
    "JudgeClient",
    "JudgeConfig",
    "JudgeConfigError",
    "JudgeOpener",
    "JudgeRequest",
    "JudgeResult",
    "JudgeStats",
    "LocalServer",
    "ParsedReply",
    "judge_opener",
    "judge_rolemrc",
    "open_judge",
    "parse_score_pair",
    "parse_verdict",
]
