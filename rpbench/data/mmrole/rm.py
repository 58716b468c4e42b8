"""The MMRole-Eval reward model's own training data (MMRole section 6.4; format ``mmrole_rm``).

The MMRole dataset's ``RM_data/train/RM-train_23k.json`` (and the validation file under ``RM_data/test/``)
holds GPT-4's evaluation trajectories cut into one sample per response and metric, in Qwen-VL-Chat's
finetuning format, as the authors' ``finetune.py`` reads it (``finetune/finetune_RM_ds.sh``)::

    [{"id": str, "conversations": [
        {"from": "user", "value": "Picture 1: <img>path</img>\\n<the reward-model prompt of one metric>"},
        {"from": "assistant", "value": "<GPT-4's evaluation>, [Scores]: (a, b)"}]}]

The image is taken out of the user turn and attached to it (``rpbench.data.mmrole.reader``, ``image_root``
confines it). A record without a ``system`` prompt gets the judge's system prompt (what the reward model
is asked with: rpbench's wording, or the authors' with option ``prompts_source``; counted as
``system_filled``). The metric is the one whose name starts the last
line of the prompt of the form ``<metric>: <question>`` (the prompt's aspect line); the reference pair is
read from the answer as strictly as the judge's replies are (``parse_score_pair``). A record without
either is an error naming file, record and field (``on_error=skip``: skipped and counted).

Train split: SFTExamples (the answer supervised). Test split: EvalExamples whose reference is the
evaluation and whose ``meta`` holds ``metric``, ``score``, ``reference_judge`` (option, the data
config's: GPT-4 for this file), ``model`` (the record's ``model`` if it has one; the released file does
not say which model answered), ``scenario`` (``reward_model``) and ``question``: the response judged, the
same for the eight metric samples of one response (a digest of the image and the prompt without its
aspect line), so agreement statistics can group them.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rpbench.core.typed import Problem
from rpbench.data.errors import ReadResult
from rpbench.data.mmrole.prompts import METRICS, parse_score_pair, review_prompts
from rpbench.data.mmrole.reader import SYSTEM_FILLED, MMRoleImages, dialogue
from rpbench.data.readers import (
    FORMATS,
    DataFormat,
    ReadPolicy,
    Source,
    as_object,
    optional_str,
    read_file,
    record_id,
)
from rpbench.data.records import EvalExample, SFTExample

SCENARIO = "reward_model"
UNNAMED_MODEL = "not recorded"
_ASPECT_LINE = re.compile(rf"^({'|'.join(re.escape(m) for m in METRICS)}): .*$", re.MULTILINE)


@dataclass(frozen=True, kw_only=True)
class ReviewerOptions(MMRoleImages):
    """The keys of the reward-model formats' data configs (``mmrole_rm``, ``mmrole_reviews``): the image folder
    and who wrote the evaluations read (named in every test sample and in the agreement report)."""

    reference_judge: str

    def problems(self) -> list[Problem]:
        return [] if self.reference_judge.strip() else [("reference_judge", "who wrote the evaluations read")]


def read_train(path: str | Path, options: ReviewerOptions, policy: ReadPolicy) -> ReadResult[SFTExample]:
    """One SFTExample per record: the judge's system prompt, the prompt with its image, the evaluation."""
    return _read(path, options, policy, test=False)


def read_test(path: str | Path, options: ReviewerOptions, policy: ReadPolicy) -> ReadResult[EvalExample]:
    """One EvalExample per record (see the module docstring for ``meta``); ``task`` is the metric."""
    return _read(path, options, policy, test=True)


def _read(path: str | Path, options: ReviewerOptions, policy: ReadPolicy, *, test: bool) -> ReadResult:
    judge, root = options.reference_judge, options.image_folder()
    filled: set[str] = set()
    system = review_prompts(policy.prompts_source).system
    turn_field = None if test else policy.turn_field

    def parse(raw: Any, source: Source) -> SFTExample | EvalExample:
        record = as_object(raw, source)
        rid, source = record_id(record, "id", source)
        turns, image = dialogue(record, source, root, system, turn_field, filled, rid)
        if [t.role for t in turns] != ["system", "user", "assistant"]:
            raise source.error("conversations", "one user turn (the prompt) and one assistant turn (the evaluation)")
        prompt, evaluation = turns[1].content, turns[2].content
        metric, key = _metric_and_response(prompt, image, source)
        pair = parse_score_pair(evaluation)
        if pair is None:
            raise source.error("conversations[1].value", "an evaluation ending in [Scores]: (a, b), each from 1 to 10")
        model = optional_str(record, "model", source) or UNNAMED_MODEL
        meta = {
            "metric": metric,
            "score": list(pair),
            "reference_judge": judge,
            "model": model,
            "scenario": SCENARIO,
            "question": key,
            "image": image,
        }
        if test:
            return EvalExample(rid, turns[:2], evaluation, metric, meta)
        return SFTExample(rid, turns, meta)

    result = read_file(path, parse, policy.on_error, "error" if test else policy.duplicates)
    if filled:
        result.counts[SYSTEM_FILLED] = sum(example.id in filled for example in result.examples)
    return result


def _metric_and_response(prompt: str, image: str, source: Source) -> tuple[str, str]:
    """The metric of the prompt's aspect line, and a digest naming the response judged (the image and the
    prompt without that line)."""
    lines = list(_ASPECT_LINE.finditer(prompt))
    if not lines:
        raise source.error(
            "conversations[0].value", f"a line '<metric>: <question>' naming one of the metrics {list(METRICS)}"
        )
    last = lines[-1]
    rest = prompt[: last.start()] + prompt[last.end() :]
    digest = hashlib.sha256(f"{image}\n{rest}".encode()).hexdigest()[:16]
    return last.group(1), digest


FORMATS.register("mmrole_rm")(DataFormat(ReviewerOptions, train=read_train, test=read_test))
