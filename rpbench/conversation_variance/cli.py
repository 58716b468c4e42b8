"""The command line of rpbench.conversation_variance: a sweep folder in, variance.md and variance.json out."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from rpbench.conversation_variance.analysis import analyse
from rpbench.conversation_variance.design import read_design
from rpbench.conversation_variance.report import markdown
from rpbench.core.errors import RpbenchError


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m rpbench.conversation_variance",
        description="How much of a conversation score's variance comes from the policy, the user simulator and "
        "the judge: crossed random-effects components of a sweep's per-session scores.",
    )
    p.add_argument("sweep", type=Path, help="a multirun folder of evaluator=conversation runs (sweep.py)")
    p.add_argument(
        "--policy",
        nargs="+",
        default=["seed", "evaluator.generation.seed"],
        help="override keys of the policy: its training seed, its sampling seed (default: %(default)s)",
    )
    p.add_argument(
        "--simulator",
        nargs="+",
        default=["evaluator.simulator.seed"],
        help="override keys of the user simulator (default: %(default)s)",
    )
    p.add_argument(
        "--judge", nargs="+", default=["judge", "judge.*"], help="override keys of the judge (default: %(default)s)"
    )
    p.add_argument("--dimension", default="overall", help="a rubric dimension, or overall: the mean of all")
    p.add_argument(
        "--drop-incomplete",
        action="store_true",
        help="leave out the scenarios without a score in every run (named in the report) instead of stopping",
    )
    p.add_argument("--ci-width", type=float, default=0.2, help="the CI width the sample sizes are for (score units)")
    p.add_argument("--confidence", type=float, default=0.95, help="of the CIs (default: %(default)s)")
    p.add_argument("--policy-seeds", type=int, default=1, help="policy seeds per scenario in the sample sizes")
    p.add_argument("--simulator-seeds", type=int, default=1, help="simulator seeds per scenario in the sample sizes")
    p.add_argument("--max-judges", type=int, default=5, help="the sample-size table's last number of judges")
    p.add_argument("--n-resamples", type=int, default=1000, help="bootstrap resamples of the scenarios")
    p.add_argument("--seed", type=int, default=0, help="of the bootstrap")
    return p


def problems(args: argparse.Namespace) -> list[str]:
    found = [] if args.ci_width > 0 else ["--ci-width: a width > 0"]
    found += [] if 0 < args.confidence < 1 else ["--confidence: a level in (0, 1)"]
    for name in ("policy_seeds", "simulator_seeds", "max_judges", "n_resamples"):
        found += [] if getattr(args, name) >= 1 else [f"--{name.replace('_', '-')}: an integer >= 1"]
    return found


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if found := problems(args):
        print("error: " + "; ".join(found), file=sys.stderr)
        return 1
    keys = {"policy": args.policy, "simulator": args.simulator, "judge": args.judge}
    try:
        design = read_design(args.sweep, keys, args.dimension, args.drop_incomplete)
        seeds = {"policy": args.policy_seeds, "simulator": args.simulator_seeds}
        result = analyse(design, args.n_resamples, args.seed, args.confidence, args.ci_width, seeds, args.max_judges)
    except (OSError, RpbenchError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    text = markdown(args.sweep.name, result)
    (args.sweep / "variance.json").write_text(json.dumps(result, indent=2))
    (args.sweep / "variance.md").write_text(text)
    print(text, end="")
    print(f"variance by source: {args.sweep / 'variance.md'}", flush=True)
    return 0
