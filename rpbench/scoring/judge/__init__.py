"""LLM-as-a-judge: rubric prompts and strict parsers over the chat client (``rpbench.scoring.chat``).

with open_client(run.judge, local_server) as client:   # TrainEvalRun.judge; judge=local: the server handed in
    rolemrc = judge_rolemrc(examples, predictions, client, max_tokens)
    mmrole = judge_answers(answers_dir, client, reviews_dir, max_tokens)   # rpbench.eval.benchmarks.mmrole.judging
"""

from rpbench.scoring.judge.parse import parse_score_pair, parse_verdict
from rpbench.scoring.judge.rolemrc_rubrics import RUBRICS, judge_rolemrc

__all__ = ["RUBRICS", "judge_rolemrc", "parse_score_pair", "parse_verdict"]
