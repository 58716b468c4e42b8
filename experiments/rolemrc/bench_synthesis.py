"""Synthesis throughput: items per minute of ``task=synthesize`` against rpbench's local OpenAI-compatible server.

    python experiments/rolemrc/bench_synthesis.py                          # tiny-qwen2 on CPU, about a minute
    python experiments/rolemrc/bench_synthesis.py --model qwen2.5-0.5b --concurrency 1 8 32 --items 256

One server (``rpbench.serve``, ``--model``, batches of up to ``--max-batch-size``) is started once; then, for each
concurrency bound, the profiles stage of a fresh run (its own folder, no reply cache, one try per item) expands
``--items`` personas, each request asking for ``--max-tokens`` tokens. The stage's own clock (``synthesis.json``)
gives the seconds; items per minute counts every answered item, accepted or rejected (a random tiny model's
replies are rejected as ``not_json``: the request work is the same). The default bound is ``judge.concurrency``
of conf/judge/openai.yaml.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def compose(overrides: list[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return hydra_compose("config", overrides=overrides)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny-qwen2", help="a conf/model name served by rpbench.serve")
    parser.add_argument("--items", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--max-batch-size", type=int, default=8)
    parser.add_argument("--concurrency", type=int, nargs="+", default=None, help="default: 1 and judge.concurrency")
    args = parser.parse_args()

    from rpbench.serve.running import serve_in_thread
    from rpbench.synth.synthesize import synthesize_run
    from rpbench.validate import validate

    default_bound = int(compose(["judge=openai"]).judge.concurrency)
    bounds = args.concurrency or [1, default_bound]
    rows = []
    with (
        tempfile.TemporaryDirectory() as tmp,
        serve_in_thread(args.model, {"max_batch_size": args.max_batch_size}) as server,
    ):
        personas = Path(tmp) / "personas.txt"
        personas.write_text(
            "".join(f"A craftsman of trade number {i} who keeps a small workshop\n" for i in range(args.items))
        )
        for bound in bounds:
            out = Path(tmp) / f"c{bound}"
            cfg = compose(
                [
                    "task=synthesize",
                    "synth=rolemrc",
                    "judge=vllm",
                    f"judge.base_url={server.base_url}",
                    f"judge.model={server.model_name}",
                    "judge.api_key_env=null",
                    "judge.cache_path=null",
                    "judge.progress=false",
                    f"judge.concurrency={bound}",
                    f"synth.out_dir={out}",
                    f"synth.personas_file={personas}",
                    f"synth.n_personas={args.items}",
                    "synth.stages=[personas,profiles]",
                    "synth.profile_tries=1",
                    f"synth.max_tokens.profile={args.max_tokens}",
                    f"synth.batch_size={args.items}",
                ]
            )
            stage = synthesize_run(validate(cfg))["stages"]["profiles"]
            items = stage["accepted"] + stage["rejected"]
            tokens = stage["usage"]["this_run"]["completion_tokens"]
            rows.append((bound, items, stage["seconds"], 60 * items / stage["seconds"], tokens / stage["seconds"]))
    print(f"model={args.model} items={args.items} max_tokens={args.max_tokens} max_batch_size={args.max_batch_size}")
    print(f"{'concurrency':>11} {'items':>6} {'seconds':>8} {'items/min':>10} {'completion tok/s':>17}")
    for bound, items, seconds, per_minute, tok_s in rows:
        print(f"{bound:>11} {items:>6} {seconds:>8.1f} {per_minute:>10.1f} {tok_s:>17.1f}")


if __name__ == "__main__":
    main()
