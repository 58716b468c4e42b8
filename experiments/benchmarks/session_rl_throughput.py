"""Throughput of session RL (``objective=grpo env=conversation``): sessions per hour against sessions per step.
Not a test; prints two tables.

python experiments/benchmarks/session_rl_throughput.py [--steps 4] [--turns 3] [--max-new-tokens 16]

The tiny model (``--model``, a conf/model entry) plays every session of a step together: each turn is one
``generate`` call over every live session (``ConversationEnv.play``, counted there as
``sessions_per_generate``), then the scripted user simulator (a stdlib HTTP server on 127.0.0.1 that answers
"Tell me more about that." after ``--simulator-latency`` seconds) is asked for every live session's next
message at once; the server records how many of its requests were in flight together. Every session runs to
``--turns`` character turns, so each step does the same work per session.

1. Whole GRPO steps through the real training loop (``rpbench.training.train``, Lightning): one scenario,
   ``objective.num_generations`` = sessions per step (2, 4, 8; GRPO compares two sessions at least, so 1 is not
   a GRPO step), a constant session reward (no judge). Step time: the median over the steps after the first
   (warm-up), measured by a Trainer callback around each training batch (rollout, reward, loss, backward,
   optimiser step).
2. The rollout phase alone (``ConversationEnv.play``) for 1, 2, 4 and 8 sessions, the same settings.

Sessions per hour = sessions per step x 3600 / step time. Step time grows sub-linearly when doubling the
sessions less than doubles it (the ratio column: step time / the smallest row's, against sessions / its
sessions). With CUDA present, every row is measured again on the GPU (rows marked ``cuda``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from lightning.pytorch.callbacks import Callback
from omegaconf import OmegaConf, open_dict

from rpbench.core.paths import CONF_DIR
from rpbench.data import readers
from rpbench.data.readers import NoRubrics
from rpbench.models import chat_renderer, load
from rpbench.models.generation import default_stop_ids
from rpbench.objectives.conversation_env import ConversationEnv, ConversationEnvSettings
from rpbench.objectives.sampling import rollout_options
from rpbench.scoring.chat.client import open_client
from rpbench.scoring.rewards import REWARDS
from rpbench.training import train
from rpbench.validate import validate

STEPS: list[dict] = []  # what StepTimer measured, one entry per training batch
PLAYS: list[float] = []  # the seconds of each ConversationEnv.play (timed_play)


def constant(prompts, completions, references) -> list[float]:
    return [1.0] * len(completions)


def timed_play(play):
    """``ConversationEnv.play``, its seconds appended to PLAYS (the rollout phase of a step)."""

    def timed(self, *args, **kwargs):
        started = time.perf_counter()
        try:
            return play(self, *args, **kwargs)
        finally:
            PLAYS.append(time.perf_counter() - started)

    return timed


class StepTimer(Callback):
    """Each training batch's seconds and the live sessions of each generate call in its rollout."""

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.started = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        seconds = time.perf_counter() - self.started
        per_generate = list(pl_module.env.sessions_per_generate)
        STEPS.append({"seconds": seconds, "rollout": PLAYS[-1], "per_generate": per_generate})


class User(BaseHTTPRequestHandler):
    """The scripted user: one fixed message after ``server.latency`` seconds; counts requests in flight."""

    def do_POST(self):  # noqa: N802 (the handler's name)
        self.rfile.read(int(self.headers["Content-Length"]))
        with self.server.lock:
            self.server.in_flight += 1
            self.server.most_in_flight = max(self.server.most_in_flight, self.server.in_flight)
        time.sleep(self.server.latency)
        message = {"role": "assistant", "content": "Tell me more about that."}
        body = json.dumps(
            {
                "id": "x",
                "object": "chat.completion",
                "created": 0,
                "model": "user",
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        with self.server.lock:
            self.server.in_flight -= 1

    def log_message(self, *args):
        pass


def composed(out: Path, url: str, args: argparse.Namespace, sessions: int, device: str):
    scenarios = out / "train.jsonl"
    scenario = {"character": "Ida", "card": "Ida, a gardener.", "persona": "Jo", "goal": "herbs", "turns": args.turns}
    scenarios.write_text(json.dumps({"id": "train-ida", "opening": "Hello, what should I plant?", **scenario}) + "\n")
    overrides = [
        f"hydra.run.dir={out}",
        f"model={args.model}",
        "objective=grpo",
        "env=conversation",
        "data=sample_conversation",
        f"data.files.train={scenarios}",
        "data.val_fraction=0",
        "judge=openai",
        f"judge.base_url={url}",
        "judge.api_key_env=null",
        "judge.cache_path=null",
        "judge.progress=false",
        f"judge.concurrency={max(sessions, 1)}",
        f"env.max_turns={args.turns}",
        "env.rewards=[{name: bench_constant, weight: 1.0}]",
        "env.simulator_checks=[]",  # the scripted user repeats itself
        f"objective.epochs={args.steps + 1}",  # the first step is a warm-up
        "objective.batch_size=1",
        f"objective.num_generations={max(sessions, 2)}",
        f"objective.max_completion_length={args.max_new_tokens}",
        "save_model=false",
        "trainer.enable_progress_bar=false",
        f"trainer.accelerator={'gpu' if device == 'cuda' else 'cpu'}",
        "+trainer.callbacks=[{_target_: __main__.StepTimer}]",
    ]
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=overrides, return_hydra_config=True)
        with open_dict(cfg):
            cfg.hydra.runtime.output_dir = str(out)
        HydraConfig.instance().set_config(cfg)
    return cfg, scenarios


def grpo_steps(url: str, args: argparse.Namespace, sessions: int, device: str) -> dict:
    """Whole GRPO steps of ``sessions`` sessions: the median step time after the first step, sessions per
    generate call over the measured steps."""
    STEPS.clear()
    PLAYS.clear()
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder)
        cfg, scenarios = composed(out, url, args, sessions, device)
        settings = validate(cfg)
        examples = readers.read("conversation", "train", scenarios, NoRubrics(task_dimensions=None)).examples
        model, tokenizer = load(settings.model)
        train(settings.training, model, tokenizer, examples, [], out, logger=None)
    measured = STEPS[1:]
    calls = [n for step in measured for n in step["per_generate"]]
    return {
        "seconds": statistics.median(s["seconds"] for s in measured),
        "rollout": statistics.median(s["rollout"] for s in measured),
        "per_generate": sum(calls) / len(calls),
    }


def rollouts_only(url: str, args: argparse.Namespace, sessions: int, device: str) -> dict:
    """``ConversationEnv.play`` of ``sessions`` sessions of one scenario: the median of ``--steps`` plays after a
    warm-up play."""
    with tempfile.TemporaryDirectory() as folder:
        cfg, scenarios = composed(Path(folder), url, args, sessions, device)
        settings = validate(cfg)
        scenario = readers.read("conversation", "train", scenarios, NoRubrics(task_dimensions=None)).examples[0]
        model, tokenizer = load(settings.model)
        model = model.to(device)
        values = OmegaConf.to_container(cfg.env, resolve=True)
        env_settings = ConversationEnvSettings.parse(values, "env")
        renderer = chat_renderer(settings.model, tokenizer, settings.data.max_length)
        options = rollout_options(
            max_new_tokens=args.max_new_tokens, temperature=1.0, top_p=1.0, top_k=0, cache="dynamic",
            gather_per_batch=True,
        )  # fmt: skip
        env = ConversationEnv(env_settings, open_client, renderer)
        stop_ids, times, calls = default_stop_ids(model, tokenizer), [], []
        try:
            for k in range(args.steps + 1):
                started = time.perf_counter()
                env.play(model, [scenario], sessions, options, stop_ids, tokenizer.pad_token_id, seed=k)
                if k:
                    times.append(time.perf_counter() - started)
                    calls += env.sessions_per_generate
        finally:
            env.close()
    seconds = statistics.median(times)
    return {"seconds": seconds, "rollout": seconds, "per_generate": sum(calls) / len(calls)}


def table(title: str, rows: list[tuple[str, int, dict, int]]) -> None:
    print(f"\n{title}")
    print("| device | sessions/step | step s | of it rollout s | sessions/hour | sessions per generate "
          "| simulator in flight (max) | step time ratio (sessions ratio) |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    base = {}
    for device, sessions, found, in_flight in rows:
        first = base.setdefault(device, (sessions, found["seconds"]))
        ratio = f"{found['seconds'] / first[1]:.2f} ({sessions / first[0]:.0f})"
        per_hour = sessions * 3600 / found["seconds"]
        print(f"| {device} | {sessions} | {found['seconds']:.2f} | {found['rollout']:.2f} | {per_hour:.0f} "
              f"| {found['per_generate']:.2f} "
              f"| {in_flight} | {ratio} |")  # fmt: skip
    for device in base:
        mine = [(s, f["seconds"]) for d, s, f, _ in rows if d == device]
        (s0, t0), (s1, t1) = mine[0], mine[-1]
        grows = "sub-linearly" if t1 / t0 < s1 / s0 else "linearly or worse"
        print(f"{device}: {s0} -> {s1} sessions per step, step time x{t1 / t0:.2f}: grows {grows}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny-qwen2")
    parser.add_argument("--steps", type=int, default=4, help="measured steps per row (one more runs first)")
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--simulator-latency", type=float, default=0.05, help="seconds per simulator reply")
    args = parser.parse_args()
    REWARDS.register("bench_constant")(constant)
    ConversationEnv.play = timed_play(ConversationEnv.play)
    server = ThreadingHTTPServer(("127.0.0.1", 0), User)
    server.lock, server.in_flight, server.latency = threading.Lock(), 0, args.simulator_latency
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    devices = ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]
    print(f"{args.model}, {args.turns} turns a session, {args.max_new_tokens} new tokens a turn, "
          f"simulator latency {args.simulator_latency} s, torch threads {torch.get_num_threads()}")  # fmt: skip
    steps, plays = [], []
    try:
        for device in devices:
            for sessions in (2, 4, 8):
                server.most_in_flight = 0
                steps.append((device, sessions, grpo_steps(url, args, sessions, device), server.most_in_flight))
            for sessions in (1, 2, 4, 8):
                server.most_in_flight = 0
                plays.append((device, sessions, rollouts_only(url, args, sessions, device), server.most_in_flight))
    finally:
        server.shutdown()
    table("Whole GRPO steps (rollout, reward, loss, backward, optimiser step)", steps)
    table("Rollout phase alone (ConversationEnv.play)", plays)


if __name__ == "__main__":
    main()
