"""Cut the bundled MMRole-Eval subset (rpbench/resources/mmrole_release) from a copy of the MMRole release.

    python scripts/bundle_mmrole_release.py <MMRole release folder>

Keeps, for the in-distribution test sets of the three released answer models: the official results CSVs
verbatim; every review record's id and per-metric scores (all that aggregation reads, so the CSVs can be
recomputed exactly) and, for the first REVIEW_TEXTS records of each file, the judge's review text; the
first ANSWERS answer records of gpt-4-turbo's comment set; the first RM_RECORDS review records of each file
whole (``rm_reviews/``: question, answers and reviews, what the reward-model data format reads); the release's
LICENSE.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "rpbench" / "resources" / "mmrole_release"
MODELS = ("gpt-4-turbo", "mmrole-agent", "qwen-vl-chat")
FILES = ("comment_test", "human-role_test", "inter-role_test")
REVIEW_TEXTS = 3
ANSWERS = 2
RM_RECORDS = 3


def dump(records: list, path: Path) -> None:
    """A JSON list, one record per line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(r, ensure_ascii=False, separators=(",", ":")) for r in records]
    path.write_text("[\n" + ",\n".join(lines) + "\n]\n", encoding="utf-8")


def review_record(record: dict, keep_text: bool) -> dict:
    kept = {m: (v if keep_text else {"score": v["score"]}) for m, v in record["rm_review"].items()}
    return {"id": record["id"], "rm_review": kept}


def main(release: Path) -> None:
    for model in MODELS:
        for name in FILES:
            reviews = json.loads((release / "in-test_reviews" / model / f"{name}.json").read_text(encoding="utf-8"))
            dump(
                [review_record(r, i < REVIEW_TEXTS) for i, r in enumerate(reviews)],
                OUT / "in-test_reviews" / model / f"{name}.json",
            )
            dump(reviews[:RM_RECORDS], OUT / "rm_reviews" / model / f"{name}.json")
            results = OUT / "in-test_results" / model
            results.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(release / "in-test_results" / model / f"{name}.csv", results / f"{name}.csv")
    answers = json.loads((release / "in-test_answers" / "gpt-4-turbo" / "comment_test.json").read_text("utf-8"))
    dump(answers[:ANSWERS], OUT / "in-test_answers" / "gpt-4-turbo" / "comment_test.json")
    shutil.copyfile(release / "LICENSE", OUT / "LICENSE")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
