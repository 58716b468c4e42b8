"""RPGBench readers: persona-grounded role-play dialogues with distribution-shifted test splits.

The file is one JSON object mapping split names to lists of samples: ``IDTrain`` (training) and
``IDTest``, ``OOD1Test``, ``OOD2Test``, ``OOD3Test`` (test). A sample::

    {"sample_ID": str, "user_persona": str | object, "agent_character": object,
     "dialogue_context": [{"user_query": str}, {"agent_response": str}, ..., {"user_query": str}],
     "agent_golden_response": str, "subset_tag": str, "reasoning": str (optional)}

The context alternates user queries and agent responses, starting and ending on a user query. The
prompt is the released evaluation's layout (``rpbench.data.remid_prompts``): one system message and one
user message with the tagged user persona, agent character and dialogue context (``policy_prompt:
naive``: the untagged layout the authors use for base LLMs); the golden response is the reference (test)
or the supervised final turn (training). ``subset_tag`` gives the distribution shift (SHIFTS; an unknown
tag is an error) and the category the R-EMID analysis estimates on (``category``: ``IDTest`` for every
in-distribution record, else the tag). ``reasoning`` (optional) is a reasoning text r for the sample,
inferred from its input alone (R-EMI conditions on it); the authors' CoRL data calls it
``thought_policy_generation``, read as the same field (a sample with both is an error). ``meta`` holds
split, shift, category, persona, character, the dialogue context (``dialogue``: role/content dicts), the
prompt slots (``x``) and the reasoning when present.

Options (``RPGBenchOptions``, the data config's keys): ``test_splits`` for ``read_test`` (``read_sft`` reads
TRAIN_SPLITS; ``read_training_samples`` any); ``reasoning_in_target`` (the Thinking recipes) makes ``read_sft``
supervise each sample's reasoning before its golden response (``reasoning_target``; a training sample without
reasoning is then an error); ``policy_prompt`` (tagged | naive) and the policy's ``prompts_source``
(``data.prompts_source``) choose the prompt; ``remid_estimator``, ``remid_encoder_fallback``,
``remid_reasoning_max_new_tokens`` and ``remid_reasoning_temperature`` are read by the rpgbench evaluator's config
(``${data.remid_estimator}``) and its decoding presets.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from rpbench.core.errors import DataFormatError
from rpbench.core.typed import Problem
from rpbench.data.errors import ReadResult
from rpbench.data.readers import (
    FORMATS,
    DataFormat,
    FormatOptions,
    ReadPolicy,
    Source,
    as_object,
    checked_text,
    collect,
    existing_file,
    load_document,
    optional_str,
    record_id,
    require,
    require_list,
    require_str,
    type_name,
)
from rpbench.data.records import EvalExample, SFTExample, Turn, reasoning_target
from rpbench.data.remid_prompts import RolePlayInput, remid_prompts

TEST_SPLITS: tuple[str, ...] = ("IDTest", "OOD1Test", "OOD2Test", "OOD3Test")
TRAIN_SPLITS: tuple[str, ...] = ("IDTrain",)
SHIFTS: dict[str, str] = {
    "english": "in_distribution",
    "IDTest": "in_distribution",
    **dict.fromkeys(("german", "spanish", "chinese", "japanese", "korean"), "user"),
    **dict.fromkeys(("Literature", "Film & Television", "Theater", "Gaming"), "character"),
    **dict.fromkeys(("TurnLevelComposition", "WordLevelComposition"), "composition"),
}
ID_CATEGORY = "IDTest"
POLICY_PROMPTS = ("tagged", "naive")
PolicyPrompt = Literal[POLICY_PROMPTS]  # type: ignore[valid-type]
CONTEXT_KEYS = ("user_query", "agent_response")
REASONING_KEYS = ("reasoning", "thought_policy_generation")  # ours, the authors' CoRL data's


@dataclass(frozen=True, kw_only=True)
class RPGBenchOptions(FormatOptions):
    """The keys of the ``rpgbench`` format's data configs (module docstring)."""

    test_splits: tuple[str, ...]
    policy_prompt: PolicyPrompt
    reasoning_in_target: bool
    remid_estimator: str | None  # the R-EMID estimator pair the rpgbench evaluator defaults to (null: none)
    remid_encoder_fallback: bool | None  # evaluator.generalization.encoder_fallback's default (only the sample's)
    # evaluator.generalization.reasoning's max_new_tokens and temperature defaults (only the sample's: its tiny
    # pair's context is short, and greedy, a random model writes whitespace)
    remid_reasoning_max_new_tokens: int | None
    remid_reasoning_temperature: float | None

    only_some = ("remid_encoder_fallback", "remid_reasoning_max_new_tokens", "remid_reasoning_temperature")

    def problems(self) -> list[Problem]:
        return [] if self.test_splits else [("test_splits", f"the test splits read, e.g. {list(TEST_SPLITS)}")]


def read_test(path: str | Path, options: RPGBenchOptions, policy: ReadPolicy) -> ReadResult[EvalExample]:
    """Test samples; ``task`` is the subset tag, ``meta`` holds shift, split, character and persona."""
    prompt = (options.policy_prompt, policy.prompts_source)

    def parse(raw: tuple[str, Any], source: Source) -> EvalExample:
        split, sample = raw
        rid, source, turns, golden, meta = _sample(sample, source, split, prompt)
        tag = require_str(sample, "subset_tag", source)
        if tag not in SHIFTS:
            raise source.error("subset_tag", f"one of {sorted(SHIFTS)}, got {tag!r}")
        return EvalExample(rid, turns, golden, tag, {"shift": SHIFTS[tag], "category": category_of(tag), **meta})

    return _read(path, options.test_splits, parse, policy.on_error)


def category_of(tag: str) -> str:
    """The category R-EMID is estimated on: ``IDTest`` for in-distribution tags, else the subset tag."""
    return ID_CATEGORY if SHIFTS[tag] == "in_distribution" else tag


@dataclass(frozen=True)
class Replied:
    """The test records an evaluation scores, and the count per category of those left out."""

    examples: list[EvalExample]
    excluded: Counter[str]  # category -> records whose scored prediction is empty


def replied_records(examples: Sequence[EvalExample], predictions: Mapping[str, str]) -> Replied:
    """The records WinRate and the R-EMID analysis both score: those whose scored prediction (think block
    removed) is not empty. An empty one (also an unclosed think block) has no reply to judge or embed; it is
    left out of both, and counted per category."""
    missing = [e.id for e in examples if e.id not in predictions]
    if missing:
        raise ValueError(f"{len(missing)} test records have no prediction (first: {missing[:5]})")
    kept = [e for e in examples if predictions[e.id].strip()]
    excluded = Counter(str(e.meta["category"]) for e in examples if not predictions[e.id].strip())
    return Replied(kept, excluded)


def read_sft(path: str | Path, options: RPGBenchOptions, policy: ReadPolicy) -> ReadResult[SFTExample]:
    """The training samples of TRAIN_SPLITS (``read_training_samples``)."""
    return read_training_samples(path, TRAIN_SPLITS, options.policy_prompt, options.reasoning_in_target, policy)


def read_training_samples(
    path: str | Path, splits: Sequence[str], layout: PolicyPrompt, reasoning_in_target: bool, policy: ReadPolicy
) -> ReadResult[SFTExample]:
    """Training samples of ``splits``, prompted in ``layout``: the context followed by the golden response as the
    supervised turn (with ``reasoning_in_target``, the sample's reasoning and then the golden response:
    ``reasoning_target``)."""
    prompt = (layout, policy.prompts_source)

    def parse(raw: tuple[str, Any], source: Source) -> SFTExample:
        split, sample = raw
        rid, source, turns, golden, meta = _sample(sample, source, split, prompt)
        if (tag := optional_str(sample, "subset_tag", source)) is not None:
            meta["subset_tag"] = tag
        if reasoning_in_target:
            if "reasoning" not in meta:
                raise source.error(
                    REASONING_KEYS[0],
                    f"a reasoning text ({' or '.join(REASONING_KEYS)}): data.reasoning_in_target=true trains it",
                )
            golden = reasoning_target(meta["reasoning"], golden)
        return SFTExample(rid, (*turns, Turn("assistant", golden)), meta)

    return _read(path, splits, parse, policy.on_error, policy.duplicates)


def _read(path: str | Path, splits: Sequence[str], parse, on_error: str, duplicates: str = "error") -> ReadResult:
    p = existing_file(path)
    document = load_document(p)
    if not isinstance(document, dict):
        raise DataFormatError(
            p, "file", "<document>", f"an object mapping split names to sample lists, got {type_name(document)}"
        )
    for split in splits:
        if not isinstance(document.get(split), list):
            problem = "missing" if split not in document else f"got {type_name(document[split])}"
            raise DataFormatError(
                p, "file", split, f"a list of samples ({problem}; splits in the file: {', '.join(document) or 'none'})"
            )
    return collect(p, _records(p, document, splits), parse, on_error, duplicates)


def _records(path: Path, document: Mapping[str, Any], splits: Sequence[str]) -> Iterator[tuple[Source, Any]]:
    for split in splits:
        for index, sample in enumerate(document[split]):
            source = Source(str(path), f"{split}[{index}]", positional=True)
            sample = checked_text(sample, source)
            yield source, sample if isinstance(sample, DataFormatError) else (split, sample)


def _sample(raw: Any, source: Source, split: str, prompt: tuple[str, str | None]):
    """Common fields: (id, named source, prompt turns, golden response, meta); ``prompt``: (layout, source)."""
    sample = as_object(raw, source)
    rid, source = record_id(sample, "sample_ID", source)
    persona = require(sample, "user_persona", source)
    if not isinstance(persona, (str, dict)) or not persona:
        raise source.error("user_persona", f"a non-empty string or object, got {persona!r}")
    character = as_object(require(sample, "agent_character", source), source, "agent_character")
    if not character:
        raise source.error("agent_character", "a non-empty object")
    context = _context(require_list(sample, "dialogue_context", source), source)
    golden = require_str(sample, "agent_golden_response", source)
    layout, prompts_source = prompt
    x = RolePlayInput.of(persona, character, context)
    turns = remid_prompts(prompts_source).policy(x, naive=layout == "naive")
    meta = {
        "split": split,
        "character": character,
        "persona": persona,
        "dialogue": [t.as_message() for t in context],
        "x": x.slots(),
    }
    if (reasoning := _reasoning(sample, source)) is not None:
        meta["reasoning"] = reasoning
    return rid, source, turns, golden, meta


def _reasoning(sample: Mapping[str, Any], source: Source) -> str | None:
    present = [key for key in REASONING_KEYS if sample.get(key) is not None]
    if len(present) > 1:
        raise source.error(present[1], f"one reasoning field, got both {present[0]!r} and {present[1]!r}")
    return require_str(sample, present[0], source) if present else None


def _context(items: list[Any], source: Source) -> list[Turn]:
    turns = []
    for i, item in enumerate(items):
        key = CONTEXT_KEYS[i % 2]
        where = f"dialogue_context[{i}]"
        item = as_object(item, source, where)
        if key not in item or CONTEXT_KEYS[(i + 1) % 2] in item:
            raise source.error(
                where,
                f"an object with {key!r} and not the other key (user queries and agent "
                f"responses alternate, starting with a user query), got keys {sorted(item)}",
            )
        turns.append(
            Turn("user" if key == "user_query" else "assistant", require_str(item, key, source, f"{where}.{key}"))
        )
    if turns[-1].role != "user":
        raise source.error("dialogue_context", "a context ending on a user query")
    return turns


FORMATS.register("rpgbench")(DataFormat(RPGBenchOptions, train=read_sft, test=read_test))
