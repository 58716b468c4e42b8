"""The protocol of experiments/conversations/README.md ("The protocol a paper should use"), end to end on CPU and
offline, on the tiny models: every part is a conf/model entry served by the run on 127.0.0.1.

1. policy: the tiny policy (tiny-qwen2) trained one GRPO step on whole sessions, rewarded by a session judge
   (--reward-judge, served; in training it also plays the user, which the tiny tuning allows).
2. refusal: evaluating that policy with its reward judge as judge is refused at startup (the check reads the
   policy run's config.yaml).
3. evaluate: a separate user simulator (--simulator, SmolLM2-135M-Instruct) and a held-out judge ensemble
   (--judges) of other families than the policy's and the reward judge's, simulator checks on.
4. re-judge: the same sessions scored again by the judges sampling at temperature 0.7 (nothing simulated).
5. variance: a sweep of --judges (one judge a run) x two sampling seeds of the policy, then
   ``python -m rpbench.conversation_variance`` for the sessions a stated CI width needs (--ci-width).

Each step's command is printed, so it can be rerun with real endpoints. A step whose judges gave no verdict
fails as any run does (metrics.json marks it failed); the script reads what was written and goes on. The
summary at the end counts sessions, failures, agreement and CI widths.

    python experiments/conversations/protocol_example.py [--out outputs/protocol_example] [--sessions 3]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
QUIET = ("logger=none", "judge.cache_path=null", "judge.progress=false")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path("outputs/protocol_example"), help="the runs' folder")
    p.add_argument("--sessions", type=int, default=3, help="scenarios of the bundled sample (one session each)")
    p.add_argument("--turns", type=int, default=2, help="evaluator.max_turns")
    p.add_argument("--policy", default="tiny-qwen2", help="conf/model entry of the evaluated model")
    p.add_argument("--reward-judge", default="tiny-qwen3", help="conf/model entry rewarding the policy's training")
    p.add_argument("--simulator", default="smollm2-135m-instruct", help="conf/model entry playing the user")
    p.add_argument("--judges", nargs="+", default=["tiny-llama", "tiny-gemma2"], help="conf/model entries judging")
    p.add_argument("--ci-width", type=float, default=0.5, help="the CI width the variance step sizes sessions for")
    p.add_argument("--skip-variance", action="store_true", help="leave out step 5 (the sweep: 4 runs)")
    p.add_argument("--from-step", type=int, default=1, help="start here, reading the earlier steps' folders in --out")
    return p


def run(title: str, command: list[str], log: Path) -> tuple[int, float, str]:
    """``command`` from the repository root, its output in ``log``: (exit status, seconds, its last error line)."""
    print(f"\n== {title}\n$ {' '.join(command[1:])}", flush=True)
    start = time.monotonic()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    seconds = time.monotonic() - start
    log.write_text(done.stdout + done.stderr)
    errors = [line for line in done.stderr.splitlines() if line.startswith(("error:", "  "))]
    print(f"exit {done.returncode} after {seconds:.0f} s" + (f": {' '.join(errors)[:400]}" if errors else ""))
    return done.returncode, seconds, " ".join(errors)


def served(models: list[str], **extra: float) -> str:
    more = "".join(f", {k}: {v}" for k, v in extra.items())
    entries = ", ".join(f"{{server: {{model: {m}}}{more}}}" for m in models)
    return f"evaluator.judges=[{entries}]"


def read(folder: Path) -> dict:
    path = folder / "metrics.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def width(summary: dict) -> str:
    if summary.get("ci_low") is None:
        return "none (no score)"
    return f"{summary['ci_high'] - summary['ci_low']:.2f} (mean {summary['mean']:.2f}, n={summary['n']})"


def conversation_summary(name: str, metrics: dict) -> list[str]:
    """What an evaluation run measured: sessions, how they ended, failures of each part, agreement, CI widths."""
    c = metrics.get("eval", {}).get("conversation")
    if c is None:
        return [f"{name}: no results ({metrics.get('failed', 'metrics.json missing')})"]
    checks = c["simulator_checks"]
    failed_checks = {k: v["failed"] for k, v in checks["checks"].items() if v["failed"]}
    lines = [
        f"{name}: {c['sessions']} sessions (ended by {c['ended_by']}), cut short {c['sessions_cut_short'] or 0}, "
        f"failing a simulator check {checks['sessions_failed']} {failed_checks or ''}".rstrip(),
    ]
    simulator = metrics["eval"]["endpoints"].get("simulator")
    if simulator is not None:
        unusable = simulator["failures"]
        lines.append(f"  user simulator: {simulator['requests']} requests, {unusable} without a usable reply")
    else:
        lines.append("  user simulator: none asked (re-judged)")
    for judge, j in c.get("ensemble", {}).get("per_judge", {}).items():
        lines.append(
            f"  judge {judge}: {j['verdicts']} verdicts, {j['parse_failures']} unparsed, "
            f"{j['request_failures']} unanswered; overall CI width {width(j['scores']['overall'])}"
        )
    agreement = c.get("ensemble", {}).get("agreement", {})
    lines.append(
        f"  Krippendorff's alpha (interval) {agreement.get('interval')} over {agreement.get('pairable_units')} "
        f"pairable units; ensemble overall CI width {width(c['judge']['overall'])}"
    )
    for warning in metrics.get("warnings", []):
        if "family" in warning or "self-preference" in warning:
            lines.append(f"  warning: {warning}")
    lines.append(f"  run status: {'failed: ' + metrics['failed'] if metrics.get('failed') else 'ok'}")
    return lines


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    out = (ROOT / args.out).resolve() if not args.out.is_absolute() else args.out
    out.mkdir(parents=True, exist_ok=True)
    python = [sys.executable, "run.py"]
    data = ("data=sample_conversation", f"data.max_test_samples={args.sessions}")
    started, summary = time.monotonic(), []

    policy = out / "policy"
    step = [f"model={args.policy}", "objective=grpo", "env=conversation", "data=sample_conversation", "evaluator=none"]
    step += ["judge=local", f"judge.server.model={args.reward_judge}", "trainer.max_steps=1"]
    step += [*QUIET, f"hydra.run.dir={policy}"]
    if args.from_step <= 1:
        rc, s, _ = run("1. policy: one GRPO step rewarded by the reward judge", [*python, *step], out / "policy.log")
        summary.append(f"1. policy: exit {rc}, {s:.0f} s (reward judge {args.reward_judge})")

    parts = [f"model={args.policy}", f"init_from={policy}", *data, f"evaluator.max_turns={args.turns}"]
    parts += [f"evaluator.simulator.server={args.simulator}", "evaluator.simulator.max_tokens=32"]
    parts += ["evaluator.generation.max_new_tokens=24", "evaluator.judge_max_tokens=64"]
    parts += ["evaluator.allow_shared_judge=false"]
    parts += ["objective=none", "judge=local", *QUIET]
    if args.from_step <= 2:
        refused = out / "refused"
        rc, s, error = run(
            "2. refusal: the reward judge judging its own policy",
            [*python, *parts, f"judge.server.model={args.reward_judge}", f"hydra.run.dir={refused}"],
            out / "refused.log",
        )
        verdict = "refused at startup" if rc != 0 and "are one model" in error else f"NOT refused (exit {rc})"
        summary.append(f"2. reward judge as evaluation judge: {verdict}, {s:.0f} s")

    evaluated = out / "evaluate"
    if args.from_step <= 3:
        rc, s, _ = run(
            "3. evaluate: separate simulator, held-out judge ensemble, simulator checks on",
            [*python, *parts, served(args.judges), f"hydra.run.dir={evaluated}"],
            out / "evaluate.log",
        )
        summary += [f"3. evaluate: exit {rc}, {s:.0f} s", *conversation_summary("   sessions", read(evaluated))]

    if args.from_step <= 4:
        rejudged = out / "rejudge"
        step = [f"model={args.policy}", "objective=none", *data, f"evaluator.rejudge={evaluated}", "judge=local"]
        rc, s, _ = run(
            "4. re-judge the same sessions: the judges sampling at temperature 0.7",
            [*python, *step, *QUIET, served(args.judges, temperature=0.7), f"hydra.run.dir={rejudged}"],
            out / "rejudge.log",
        )
        summary += [f"4. re-judge: exit {rc}, {s:.0f} s", *conversation_summary("   re-judged", read(rejudged))]

    if not args.skip_variance:
        folder = out / "variance_sweep"  # one job folder per combination, named by its number
        sweep = [sys.executable, "sweep.py", *(p for p in parts if p != "judge=local"), "judge=local"]
        sweep += [f"judge.server.model={','.join(args.judges)}", "evaluator.generation.temperature=0.7"]
        sweep += ["evaluator.generation.seed=1,2", f"hydra.sweep.dir={folder}", "hydra.sweep.subdir=${hydra.job.num}"]
        rc, s, _ = run("5a. variance sweep: judges x policy sampling seeds", sweep, out / "sweep.log")
        summary.append(f"5a. variance sweep: exit {rc}, {s:.0f} s")
        command = [sys.executable, "-m", "rpbench.conversation_variance", str(folder), "--ci-width", str(args.ci_width)]
        rc, s, error = run("5b. variance components and sessions for the CI width", command, out / "variance.log")
        table = folder / "variance.md"
        summary.append(
            f"5b. variance: exit {rc}" + (f", table in {table}" if rc == 0 else f": no table ({error[:300]})")
        )

    print("\n== summary (" + f"{time.monotonic() - started:.0f} s in all)")
    print("\n".join(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
