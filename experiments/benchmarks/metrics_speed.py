"""Throughput of the reference metrics and of bootstrap aggregation; prints one line per measurement.

python experiments/benchmarks/metrics_speed.py [--n 500] [--resamples 1000]
"""

from __future__ import annotations

import argparse
import random
import time

from rpbench.eval.stats import aggregate
from rpbench.scoring.metrics import compute_metrics, load_bertscorer

WORDS = [
    "the",
    "knight",
    "queen",
    "castle",
    "sword",
    "dragon",
    "cannot",
    "answer",
    "that",
    "question",
    "because",
    "it",
    "lies",
    "outside",
    "my",
    "knowledge",
    "as",
    "a",
    "humble",
    "servant",
    "of",
    "realm",
    "I",
    "would",
    "gladly",
    "tell",
    "you",
    "about",
    "harvest",
]


def sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(15, 60))).capitalize() + "."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=500, help="prediction/reference pairs")
    parser.add_argument("--resamples", type=int, default=1000)
    args = parser.parse_args()
    rng = random.Random(0)
    preds = [sentence(rng) for _ in range(args.n)]
    refs = [sentence(rng) for _ in range(args.n)]

    start = time.perf_counter()
    scorer = load_bertscorer()
    print(f"bertscore load: {time.perf_counter() - start:.2f} s ({scorer.describe()})")
    scores = {}
    for name in ("bleu", "rouge1", "rougeLsum", "meteor", "bertscore"):
        start = time.perf_counter()
        scores.update(compute_metrics(preds, refs, [name]))  # bertscore: the scorer loaded above (cached)
        elapsed = time.perf_counter() - start
        print(f"{name:10s} {args.n / elapsed:10.1f} samples/s ({elapsed:.2f} s for {args.n})")

    tasks = [rng.choice(["a", "b", "c", "d"]) for _ in range(args.n)]
    dims = [rng.sample(["x", "y", "z"], rng.randint(1, 2)) for _ in range(args.n)]
    start = time.perf_counter()
    aggregate(scores, {"task": tasks, "dimension": dims}, n_resamples=args.resamples)
    elapsed = time.perf_counter() - start
    print(f"aggregate  {elapsed:.2f} s ({len(scores)} metrics x 8 groups, {args.resamples} resamples)")


if __name__ == "__main__":
    main()
