"""Conversation sessions per minute: batched across scenarios against one session at a time.

    python experiments/throughput/bench_conversations.py                          # tiny model, CPU, ~1 minute
    python experiments/throughput/bench_conversations.py --sessions 64 --turns 6 --max-new-tokens 64   # a GPU

The same scenarios (the bundled sample, repeated to ``--sessions`` sessions under new ids) run through
``evaluator=conversation``'s loop twice, with the same model (``--model``, a conf/model entry) and the same
local user simulator and judge (``judge=local``: rpbench.serve on 127.0.0.1 with the tiny model): batched
(one generation call per turn for every live session, the simulator's messages of a turn asked together),
then sequential (each session's loop run alone, one after the other). The model decodes greedily; the
simulator samples at ``evaluator.simulator.temperature=1`` (a random tiny model at temperature 0 answers
with nothing, which would end every session at its first turn), so both modes reach the turn limit and do
the same number of character turns (printed beside the times, with how sessions ended). Then every session
is judged once and the judge's requests per session are printed, as are the simulator's. Timings on a small
shared CPU swing with other load: compare the ratio. The simulator's requests are inside both modes' times
(judging is not timed), so the ratio is of whole sessions, not of generation alone.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path


def compose(args: argparse.Namespace, out: Path):
    from rpbench.models.config_tree import compose_run_config

    overrides = [
        "objective=none",
        "logger=none",
        "data=sample_conversation",
        "evaluator=conversation",
        f"model={args.model}",
        f"evaluator.max_turns={args.turns}",
        f"evaluator.generation.max_new_tokens={args.max_new_tokens}",
        f"evaluator.generation.batch_size={args.sessions}",
        "evaluator.simulator.temperature=1",
        f"evaluator.simulator.max_tokens={args.simulator_tokens}",
        "evaluator.drift.enabled=false",
        "judge=local",
        "judge.cache_path=null",
        "judge.progress=false",
        f"judge.server.max_batch_size={args.sessions}",
        f"evaluator.judge_max_tokens={args.judge_tokens}",
        "judge.parse_tries=1",
    ]
    return compose_run_config(overrides, out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny-qwen2")
    parser.add_argument("--sessions", type=int, default=24)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--simulator-tokens", type=int, default=16)
    parser.add_argument("--judge-tokens", type=int, default=16)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    from rpbench.eval.benchmarks.conversation.sessions import run_sessions
    from rpbench.models import for_inference
    from rpbench.pipeline import build_models, eval_context, read_data
    from rpbench.scoring.chat import open_client
    from rpbench.scoring.judge.conversation import judge_sessions, open_simulator, simulator_version
    from rpbench.serve.running import local_judge
    from rpbench.validate import validate

    scratch = tempfile.TemporaryDirectory()
    cfg = compose(args, Path(scratch.name))
    spec = validate(cfg)
    scenarios = read_data(spec.data, None, need_test=True)[0]["test"]
    examples = [
        replace(scenarios[i % len(scenarios)], id=f"{scenarios[i % len(scenarios)].id}~{i}")
        for i in range(args.sessions)
    ]
    model, tokenizer = build_models(spec.training, spec.model)["policy"]
    model = for_inference(model, tokenizer, spec.model, spec.trainer.values, None)
    with scratch as tmp, open_client(spec.judge, local_judge) as judge:
        ctx = eval_context(spec, model, tokenizer, examples, Path(tmp), None, local_judge)
        with open_simulator(judge, ctx.settings.simulator, ctx.local_judge_server, "evaluator.simulator") as simulator:
            rows = {}
            start = time.perf_counter()
            batched, _, _ = run_sessions(replace(ctx, out_dir=Path(tmp) / "batched"), simulator, simulator_version())
            rows["batched"] = (time.perf_counter() - start, batched)
            start = time.perf_counter()
            sequential = []
            for i, example in enumerate(examples):
                one = replace(ctx, examples=[example], out_dir=Path(tmp) / f"one_{i}")
                sequential += run_sessions(one, simulator, simulator_version())[0]
            rows["one at a time"] = (time.perf_counter() - start, sequential)
        before = judge.stats.requests
        records = [s.record() for s in batched]
        judge_sessions(judge, records, spec.evaluator.rubric, spec.evaluator.judge_max_tokens)
        judge_requests = judge.stats.requests - before
    print(
        f"{args.sessions} sessions, at most {args.turns} character turns, {args.max_new_tokens} new tokens "
        f"per reply, model {args.model}"
    )
    print(f"{'mode':<14} {'seconds':>8} {'sessions/min':>13} {'character turns':>16}  ended by")
    for mode, (seconds, sessions) in rows.items():
        turns = sum(s.character_turns for s in sessions)
        ended = Counter(s.ended_by for s in sessions)
        print(f"{mode:<14} {seconds:>8.2f} {60 * len(sessions) / seconds:>13.1f} {turns:>16}  {dict(ended)}")
        errors = Counter(s.error for s in sessions if s.error)
        if errors:
            print(f"{'':<14} simulator errors: {dict(errors.most_common(3))}")
    print(f"speed-up (batched / one at a time): {rows['one at a time'][0] / rows['batched'][0]:.1f}x")
    print(
        f"simulator requests per session: {simulator.stats.requests / (2 * args.sessions):.2f} "
        f"(both modes together / 2)"
    )
    print(f"judge requests per session: {judge_requests / args.sessions:.2f}")


if __name__ == "__main__":
    main()
