"""CoRL's cold-start SFT data: RPGBench records with a ``reasoning`` text (the authors' ``SThought``, a
Part 1-3 thought ending in the fenced core-features block) -> two chat files for ``data=custom objective=sft``.

- ``thought_sft.jsonl`` (the authors' ``thought_completion`` mode): the thought prompt of x (no golden
  response) -> the whole thought; the SFT run is the reasoner's start (``objective.reasoner_init_from``).
- ``pxy_sft.jsonl`` (``model_pxy``): the pxy prompt with the thought's core features -> ``## Agent
  Response`` and the golden response; the SFT run is the dialogue policy's start (``init_from``).

    python -m rpbench.objectives.corl_cold_start <rpgbench.json> <out_dir> [--splits IDTrain IDTest ...]

Every record of the chosen splits must have a reasoning text (the ones without are named in the error).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from rpbench.core.atomic import partial_path, publish
from rpbench.data.readers import STRICT
from rpbench.data.records import Turn
from rpbench.data.remid_prompts import RemidPrompts, RolePlayInput, remid_prompts
from rpbench.data.rpgbench import read_training_samples
from rpbench.objectives.grpo import prompt_and_reference


def _chat(record_id: str, prompt: Sequence[Turn], reply: str) -> dict:
    return {"id": record_id, "messages": [*(t.as_message() for t in prompt), {"role": "assistant", "content": reply}]}


def cold_start_records(examples: Sequence, prompts: RemidPrompts) -> tuple[list[dict], list[dict]]:
    """(thought SFT chats, pxy SFT chats) of RPGBench records that all have ``meta["reasoning"]``."""
    absent = [e.id for e in examples if not e.meta.get("reasoning")]
    if absent:
        raise ValueError(f"{len(absent)} of {len(examples)} records have no 'reasoning' field (first: {absent[:5]})")
    thought, pxy = [], []
    for example in examples:
        _, golden = prompt_and_reference(example)
        x, reasoning = RolePlayInput(**example.meta["x"]), str(example.meta["reasoning"])
        thought.append(_chat(example.id, prompts.thought(x), reasoning))
        pxy.append(_chat(example.id, prompts.pxy(x, prompts.core_features(reasoning)), prompts.target(golden)))
    return thought, pxy


def write_jsonl(rows: Sequence[dict], path: Path) -> None:
    partial = partial_path(path)
    with partial.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    publish(partial, path)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rpgbench_file", type=Path)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--splits", nargs="+", default=["IDTrain"], help="RPGBench splits to convert")
    parser.add_argument(
        "--prompts-source", default=None, help="a DAMO-ConvAI clone: the authors' templates instead of rpbench's"
    )
    args = parser.parse_args(argv)
    # the released prompt layout: the records' prompt slots (meta["x"]) are what the chats are built from
    examples = read_training_samples(args.rpgbench_file, args.splits, "tagged", False, STRICT).examples
    thought, pxy = cold_start_records(examples, remid_prompts(args.prompts_source))
    args.out_dir.mkdir(parents=True, exist_ok=True)
    write_jsonl(thought, args.out_dir / "thought_sft.jsonl")
    write_jsonl(pxy, args.out_dir / "pxy_sft.jsonl")
    print(f"{len(thought)} records -> {args.out_dir}/thought_sft.jsonl, {args.out_dir}/pxy_sft.jsonl")


if __name__ == "__main__":
    main()
