"""Turn-level against session-level credit on the tiny model: how many optimiser steps each needs to learn a
behaviour that only late turns are paid for. Not a timed test; prints one line per estimator and the ratio.

python experiments/benchmarks/turn_credit_learning.py [--steps 30] [--turns 3]

Sessions of ``--turns`` character turns with a scripted user (a stdlib HTTP server on 127.0.0.1 that always
answers "Go on."); no session reward (a constant 0); one turn reward, the share of the letter "e" in a reply,
paid from the second turn on. Both runs see the same total reward per session: ``session_grpo`` gives every token
of a session the group-normalised total, ``turn_loo`` (gamma 0) gives each turn its own reward's advantage over
the other sessions' same turn, so the first turn's tokens, which earn nothing, get none. A run has learnt once the
mean late-turn reward over 3 steps is twice its first 3 steps' mean.
"""

from __future__ import annotations

import argparse
import csv
import json
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from lightning.pytorch.loggers import CSVLogger
from omegaconf import open_dict

from rpbench.core.paths import CONF_DIR
from rpbench.data import readers
from rpbench.data.readers import NoRubrics
from rpbench.models import load
from rpbench.objectives.turn_credit.rewards import TURN_REWARDS
from rpbench.scoring.rewards import REWARDS
from rpbench.training import train
from rpbench.validate import validate

LATE = "bench_late_letters"


def nothing(prompts, completions, references) -> list[float]:
    return [0.0] * len(completions)


def late_letters(sessions, options) -> list[list[float]]:
    """The share of "e" in each reply from the second turn on; the first turn earns nothing."""
    replies = [s.session.replies for s in sessions]
    return [[0.0 if t == 0 else r.count("e") / max(len(r), 1) for t, r in enumerate(rs)] for rs in replies]


class User(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 (the handler's name)
        self.rfile.read(int(self.headers["Content-Length"]))
        body = json.dumps(
            {
                "id": "x",
                "object": "chat.completion",
                "created": 0,
                "model": "user",
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": "Go on."}, "finish_reason": "stop"}
                ],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def run(advantage: str, steps: int, turns: int, url: str, out: Path) -> list[float]:
    """The mean late-turn reward of each optimiser step."""
    scenarios = out / "train.jsonl"
    scenario = {"character": "Ida", "card": "Ida, a gardener.", "persona": "Jo", "goal": "herbs", "turns": turns}
    scenarios.write_text(json.dumps({"id": "train-ida", "opening": "Hello, what should I plant?", **scenario}) + "\n")
    overrides = [
        f"hydra.run.dir={out}",
        "objective=grpo",
        "env=conversation",
        "data=sample_conversation",
        "data.val_fraction=0",
        "judge=openai",
        f"judge.base_url={url}",
        "judge.api_key_env=null",
        "judge.cache_path=null",
        "judge.progress=false",
        f"env.max_turns={turns}",
        "env.rewards=[{name: bench_nothing, weight: 1.0}]",
        f"+env.turn_rewards.{LATE}=1.0",
        f"objective.advantage={advantage}",
        "objective.turn_credit.gamma=0.0",
        f"objective.epochs={steps}",
        "objective.batch_size=1",
        "objective.lr=3e-2",
        "objective.num_generations=8",
        "objective.max_completion_length=8",
        "save_model=false",
        "trainer.enable_progress_bar=false",
    ]
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=overrides, return_hydra_config=True)
        with open_dict(cfg):
            cfg.hydra.runtime.output_dir = str(out)
        HydraConfig.instance().set_config(cfg)
    settings = validate(cfg)
    examples = readers.read("conversation", "train", scenarios, NoRubrics(task_dimensions=None)).examples
    model, tokenizer = load(settings.model)
    train(settings.training, model, tokenizer, examples, [], out, logger=CSVLogger(str(out), name="csv", version=0))
    with open(out / "csv" / "version_0" / "metrics.csv", newline="") as f:
        return [
            float(r[f"train/turn_rewards/{LATE}/mean"]) for r in csv.DictReader(f) if r.get("train/turn_reward_mean")
        ]


def steps_to_learn(curve: list[float]) -> int | None:
    """The first step whose 3-step mean is twice the first 3 steps' mean (None: never)."""
    start = sum(curve[:3]) / 3
    for end in range(3, len(curve) + 1):
        if sum(curve[end - 3 : end]) / 3 >= 2 * start:
            return end
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--turns", type=int, default=3)
    args = parser.parse_args()
    REWARDS.register("bench_nothing")(nothing)
    TURN_REWARDS.register(LATE)(late_letters)
    server = ThreadingHTTPServer(("127.0.0.1", 0), User)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    found = {}
    try:
        for advantage in ("session_grpo", "turn_loo"):
            started = time.perf_counter()
            with tempfile.TemporaryDirectory() as out:
                curve = run(advantage, args.steps, args.turns, url, Path(out))
            found[advantage] = steps_to_learn(curve)
            shown = " ".join(f"{v:.3f}" for v in curve)
            print(
                f"{advantage}: steps to learn {found[advantage]} ({time.perf_counter() - started:.0f} s); curve {shown}"
            )
    finally:
        server.shutdown()
    session, turn = found["session_grpo"], found["turn_loo"]
    if session and turn:
        print(f"ratio session_grpo / turn_loo steps: {session / turn:.2f}")
    else:
        print("ratio: not defined (a run did not learn within --steps)")


if __name__ == "__main__":
    main()
