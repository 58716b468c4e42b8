"""Evaluation predictions, generated in-process (``rpbench.models.generation``) or through an
OpenAI-compatible endpoint.

A model whose family takes images (``ModelFamily.takes_images``) gets each prompt's images in-process:
the images of the turns the prompt kept after fitting (``FittedPrompt.images``); a text-only model
refuses records with images (``data.images=drop`` generates from their text). The images the model
was given are counted in the report (``images``).

Predictions go to ``predictions.jsonl``, one line per record as soon as its batch finishes, so a killed
run resumes where it stopped: ids already in the file are skipped (a line cut off mid-write is dropped
and reported), when the file was written by the same model and generation settings (its fingerprint,
``rpbench.eval.provenance``; else it is moved aside and generation starts afresh). Under multi-process
runs rank ``r`` of ``w`` takes the records ``i % w == r`` and writes its own shard file; rank zero waits
for every record to appear in the shards and merges them into
``predictions.jsonl`` in the order of the evaluation set. No collective is involved, so ranks with
uneven shards never wait on each other, except on a ZeRO-3-partitioned model (gathered once per batch, or
``synced_gpus``) or under FSDP, where every rank runs the same number of batches (padded with throw-away ones).
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from rpbench.core.distributed import all_gather_objects, rank_and_world
from rpbench.core.errors import ConfigError, DataFormatError, RpbenchError
from rpbench.data.chat import ChatRenderer, FittedPrompt, ImageBudgetError
from rpbench.data.files import confined_path
from rpbench.data.records import EvalExample
from rpbench.eval.provenance import claim, fingerprint_path, generation_settings, matches, model_identity
from rpbench.eval.settings import GenerationEndpoint
from rpbench.models.checks import config_context, generation_length_problems
from rpbench.models.families import family_of_model
from rpbench.models.generation import (
    GenerationSettings,
    default_stop_ids,
    gathers_per_batch,
    generate_batches,
    synced_gpus_needed,
)
from rpbench.models.loading import family_renderer
from rpbench.models.vision import ImageError
from rpbench.models.vllm_engine import VLLMEngine
from rpbench.scoring.chat.client import ChatClient, ChatRequest, ChatResult, image_part
from rpbench.scoring.chat.endpoints import api_key

log = logging.getLogger(__name__)


class EndpointGenerationError(RpbenchError, RuntimeError):
    """Endpoint generation requests still failing after their retries: the predictions they owe are missing."""


@dataclass
class GenerationReport:
    """What a call did: records in the evaluation set, generated now, found from an earlier run, how
    many of the prompts generated now were fitted to ``max_prompt_length`` (see ``ChatRenderer.fit_prompt``)
    and how many images they showed the model."""

    path: str
    n_total: int
    n_generated: int
    n_resumed: int
    truncated_line: str | None = None
    prompts_fitted: dict[str, int] | None = None
    # images the model was given with the prompts generated now, and those left out with dropped history turns
    images: dict[str, int] | None = None
    # endpoint generation: the client's requests, retries, failures and tokens (``RequestStats``)
    endpoint_usage: dict[str, Any] | None = None
    # an earlier file of another model or settings, moved aside (``file``) with the keys that differ (``differs``)
    set_aside: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# ------------------------------------------------------------------------------------- generation


def prompts_fitted_counts(fitted: Sequence[FittedPrompt]) -> dict[str, int]:
    """How many prompts lost history turns, and how many were cut after their system turn or from the left."""
    return {
        "history_dropped": sum(f.dropped_turns > 0 for f in fitted),
        "cut_after_system": sum(f.cut == "after_system" for f in fitted),
        "cut_left": sum(f.cut == "left" for f in fitted),
    }


def image_counts(examples: Sequence[EvalExample], fitted: Sequence[FittedPrompt] | None) -> dict[str, int]:
    """Images given to the model (``used``) and images of history turns fitting dropped (``history_dropped``);
    ``fitted`` None: the prompts were sent whole (endpoint)."""
    shown = [sum(t.image is not None for t in ex.prompt) for ex in examples]
    used = [len(f.images) for f in fitted] if fitted is not None else shown
    return {"used": sum(used), "history_dropped": sum(shown) - sum(used)}


def prompt_renderer(model, tokenizer, max_length: int, chat_template: str | None = None) -> ChatRenderer:
    """The renderer of generation prompts: the model family's messages (text, or text with images) and,
    for a family that takes images, image placeholders expanded to the images' token counts. With
    ``chat_template`` (a Jinja text: ``GenerationSettings.chat_template``'s) the plain messages in that template
    instead (text models only)."""
    family = family_of_model(model)
    if chat_template is None:
        return family_renderer(family, tokenizer, max_length)
    if family.takes_images:
        raise ValueError("a generation chat_template renders text prompts: set it to null for an image-text model")
    return ChatRenderer(tokenizer, None, max_length, chat_template=chat_template)


def prompt_budget(model, tokenizer, opts: GenerationSettings, key: str) -> int:
    """The most prompt tokens: ``max_prompt_length`` (null: the tokenizer's ``model_max_length``), less when the
    model's context leaves less room beside ``max_new_tokens``; a reply that alone fills the context is a
    ConfigError naming ``key``, the setting of ``max_new_tokens`` (validation refuses it when it can read the
    model's config before loading)."""
    config = getattr(model, "config", None)
    context = None if config is None else config_context(config)
    budget = opts.max_prompt_length or tokenizer.model_max_length
    if context is None:
        return budget
    problems = generation_length_problems(opts.max_new_tokens, context, key, type(model).__name__)
    if problems:
        raise ConfigError(problems[0])
    return min(budget, context - opts.max_new_tokens)


TEST_FILE = "data.files.test"  # how the evaluation names the file of its records


def fit_prompt(renderer: ChatRenderer, example: EvalExample, generation_prompt: bool = True) -> FittedPrompt:
    """``example``'s prompt fitted to the renderer's budget (``generation_prompt``: ending on the assistant
    header); an unusable image, or images that alone exceed the budget, are an error naming the record."""
    try:
        return renderer.fit_prompt(example.prompt, generation_prompt=generation_prompt)
    except (ImageError, ImageBudgetError) as error:
        raise DataFormatError(TEST_FILE, repr(example.id), "prompt", str(error)) from error


def prompt_images(tokenizer, example: EvalExample, fitted: FittedPrompt) -> list[str]:
    """The images of a fitted prompt, checked against its image tokens (a prompt whose tokens were cut
    through an image is an error naming the record)."""
    tokens = fitted.input_ids.count(tokenizer.image_token_id)
    expected = sum(tokenizer.image_token_count(image) for image in fitted.images)
    if tokens != expected:
        raise DataFormatError(
            TEST_FILE,
            repr(example.id),
            "prompt",
            f"a prompt that fits max_prompt_length with its images whole ({tokens} of the {expected} image tokens "
            f"of {list(fitted.images)} kept); raise max_prompt_length",
        )
    return list(fitted.images)


# ------------------------------------------------------------------------------- predictions file


def prediction_record(example: EvalExample, prediction: str) -> dict[str, Any]:
    prompt = [t.as_message() | ({"image": t.image} if t.image else {}) for t in example.prompt]
    return {
        "id": example.id,
        "task": example.task,
        "prompt": prompt,
        "prediction": prediction,
        "reference": example.reference,
        "meta": example.meta,
    }


def dumps(record: Mapping[str, Any]) -> str:
    try:
        return json.dumps(record, ensure_ascii=False) + "\n"
    except TypeError as error:
        raise ValueError(f"record {record['id']!r}: field 'meta' is not JSON-serialisable ({error})") from error


def shard_path(out_path: Path, rank: int, world_size: int) -> Path:
    return out_path.with_name(f"{out_path.stem}.rank{rank}-of-{world_size}{out_path.suffix}")


def read_predictions(
    path: Path, examples: Mapping[str, EvalExample], repair: bool
) -> tuple[dict[str, dict[str, Any]], str | None]:
    """Records in ``path`` by id (none if absent), checked against the evaluation set.

    A last line cut off mid-write is ignored and described in the second value; with ``repair`` it is
    also removed from the file so appending can continue. Any other bad line is a DataFormatError.
    """
    if not path.exists():
        return {}, None
    data = path.read_bytes()
    lines = data.split(b"\n")
    truncated = None
    if lines[-1]:  # no newline at the end: the writer was interrupted
        try:
            json.loads(lines[-1])
            if repair:
                with path.open("ab") as f:
                    f.write(b"\n")
        except ValueError:
            truncated = f"{path}: dropped an incomplete last line ({len(lines[-1])} bytes) from an interrupted run"
            if repair:
                with path.open("r+b") as f:
                    f.truncate(len(data) - len(lines[-1]))
            lines = lines[:-1]
    records: dict[str, dict[str, Any]] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as error:
            raise DataFormatError(path, f"line {number}", "json", f"not valid JSON ({error})") from error
        rid = record.get("id") if isinstance(record, dict) else None
        if not isinstance(rid, str):
            raise DataFormatError(path, f"line {number}", "id", f"expected a string id, got {rid!r}")
        if rid in records:
            raise DataFormatError(path, rid, "id", f"appears twice (line {number})")
        if rid not in examples:
            raise DataFormatError(
                path,
                rid,
                "id",
                f"not in the evaluation set ({len(examples)} records): the "
                "file belongs to another run; use a fresh output directory",
            )
        if record.get("prompt") != prediction_record(examples[rid], "")["prompt"]:
            raise DataFormatError(
                path,
                rid,
                "prompt",
                "differs from the evaluation record's prompt: the file "
                "belongs to another run; use a fresh output directory",
            )
        records[rid] = record
    return records, truncated


def index_examples(examples: Sequence[EvalExample]) -> dict[str, EvalExample]:
    by_id: dict[str, EvalExample] = {}
    for example in examples:
        if example.id in by_id:
            raise ValueError(f"evaluation set has the id {example.id!r} twice; ids must be unique")
        by_id[example.id] = example
    return by_id


def write_atomic(path: Path, records: Sequence[Mapping[str, Any]]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        for record in records:
            f.write(dumps(record))
    os.replace(tmp, path)


def merge_predictions(
    out_path: Path,
    examples: Sequence[EvalExample],
    world_size: int,
    timeout_s: float,
    fingerprint: Mapping[str, Any],
    poll_s: float = 1.0,
) -> None:
    """Wait until every record is in ``out_path`` or a shard written under ``fingerprint``, then write
    ``out_path`` in evaluation order."""
    by_id = index_examples(examples)
    shards = [shard_path(out_path, r, world_size) for r in range(world_size)] if world_size > 1 else []
    deadline = time.monotonic() + timeout_s
    while True:
        found: dict[str, dict[str, Any]] = {}
        for path in [out_path, *shards]:
            if matches(path, fingerprint):  # a shard of an earlier run, not yet moved aside by its rank: not read
                found.update(read_predictions(path, by_id, repair=False)[0])
        missing = [ex.id for ex in examples if ex.id not in found]
        if not missing:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"{out_path}: {len(missing)} of {len(examples)} predictions still missing after {timeout_s:.0f} s "
                f"(first: {missing[:3]}); shards: {[str(s) for s in shards]}. Did a rank fail? Re-running resumes."
            )
        time.sleep(poll_s)
    write_atomic(out_path, [found[ex.id] for ex in examples])
    for shard in shards:
        shard.unlink(missing_ok=True)
        fingerprint_path(shard).unlink(missing_ok=True)


def _check_text_only(examples: Sequence[EvalExample], model) -> None:
    for example in examples:
        if any(t.image for t in example.prompt):
            raise ValueError(
                f"record {example.id!r} has an image, but {type(model).__name__} is a text-only model (its family "
                "does not take images): use a vision-language model (e.g. model=tiny-qwen2-vl), or set "
                "data.images=drop to generate from the records' text alone"
            )


def local_fingerprint(identity: Mapping[str, Any], backend: str, opts: GenerationSettings) -> dict[str, Any]:
    """What in-process predictions are resumed under: the model's ``identity``, the backend, the settings."""
    return {**identity, "backend": backend, **generation_settings(opts)}


def endpoint_fingerprint(endpoint: GenerationEndpoint, opts: GenerationSettings) -> dict[str, Any]:
    """What an endpoint's predictions are resumed under: its address and model name, the settings."""
    return {"backend": "endpoint", "endpoint.base_url": endpoint.base_url, "endpoint.model": endpoint.model} | (
        generation_settings(opts)
    )


def generate_predictions(
    model,
    tokenizer,
    examples: Sequence[EvalExample],
    out_path: str | Path,
    opts: GenerationSettings,
    rank: int = 0,
    world_size: int = 1,
    engine: VLLMEngine | None = None,
    identity: Mapping[str, Any] | None = None,
    what: str = "replies",
    key: str = "evaluator.generation.max_new_tokens",
) -> GenerationReport:
    """Generate this rank's share of ``examples`` into ``predictions.jsonl`` (resumable); rank 0 merges.

    Each line: ``{"id", "task", "prompt", "prediction", "reference", "meta"}``. Returns what was done;
    on rank 0 the merged file is complete and in the order of ``examples`` when this returns. ``engine``:
    generate with an in-process vLLM engine (one process) instead of the model's batched ``generate``.
    ``identity``: the model's (``provenance.model_identity``), when the caller has it already. The file resumes
    only under the same identity and generation settings (``provenance.claim``). ``what``: what is generated, as
    the progress bar names it (``generate <what>``, with the rank when there are several); ``key``: the setting
    of ``opts``, as errors name it.
    """
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} outside world of size {world_size}")
    examples = list(examples)
    by_id = index_examples(examples)
    takes_images = family_of_model(model).takes_images
    if not takes_images:
        _check_text_only(examples, model)
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    own = out_path if world_size == 1 else shard_path(out_path, rank, world_size)
    identity = identity if identity is not None else model_identity(model, tokenizer)
    fingerprint = local_fingerprint(identity, "vllm" if engine is not None else "local", opts)
    set_aside = claim(own, fingerprint)
    if own != out_path and rank == 0:
        set_aside = claim(out_path, fingerprint) or set_aside
    done, truncated = read_predictions(own, by_id, repair=True)
    if own != out_path and matches(out_path, fingerprint):
        done.update(read_predictions(out_path, by_id, repair=False)[0])
    if truncated:
        log.warning(truncated)
    share = examples[rank::world_size]
    todo = [ex for ex in share if ex.id not in done]
    synced = synced_gpus_needed(model, opts, world_size)
    in_step = synced or (world_size > 1 and gathers_per_batch(model, opts))  # every rank: as many generate calls
    min_batches = math.ceil(math.ceil(len(examples) / world_size) / opts.batch_size) if in_step else 0
    stop_ids = default_stop_ids(model, tokenizer)
    renderer = prompt_renderer(model, tokenizer, prompt_budget(model, tokenizer, opts, key), opts.template_text)
    fitted = [fit_prompt(renderer, ex, opts.generation_prompt) for ex in todo]
    prompts = [f.input_ids for f in fitted]
    images = [prompt_images(tokenizer, ex, f) for ex, f in zip(todo, fitted)] if takes_images else None
    if engine is not None:
        if images is not None and any(images):
            raise ValueError(
                "evaluator.backend=vllm generates from text only: use backend=local for an image-text model"
            )
        batches = engine.generate_batches(tokenizer, prompts, opts, stop_ids)
    else:
        batches = generate_batches(
            model,
            tokenizer,
            prompts,
            opts,
            stop_ids,
            min_batches=min_batches,
            synced_gpus=synced,
            desc=f"generate {what}" + (f" (rank {rank})" if world_size > 1 else ""),
            images=images,
        )
    with own.open("a", encoding="utf-8") as f:
        for batch, completions in batches:
            for i, text in zip(batch, completions):
                f.write(dumps(prediction_record(todo[i], opts.reply(text))))
            f.flush()
    counts = {"prompts_fitted": prompts_fitted_counts(fitted), "images": image_counts(todo, fitted)}
    if world_size > 1 and rank_and_world()[1] == world_size:  # every rank's prompts
        parts = all_gather_objects(counts)
        counts = {name: {key: sum(part[name][key] for part in parts) for key in counts[name]} for name in counts}
    if rank == 0:
        merge_predictions(out_path, examples, world_size, opts.merge_timeout_s, fingerprint)
    return GenerationReport(
        str(out_path if rank == 0 else own),
        len(examples),
        len(todo),
        len(share) - len(todo),
        truncated,
        counts["prompts_fitted"],
        counts["images"],
        set_aside=set_aside,
    )


# ------------------------------------------------------------------------------------ endpoint


def image_path(example: EvalExample, index: int, image_root: Path | None) -> Path:
    """Where the image of prompt turn ``index`` is: a file inside ``image_root`` (``confined_path``)."""
    image = example.prompt[index].image
    if image_root is None:
        raise ValueError(f"record {example.id!r} has an image ({image}); pass image_root")
    return confined_path(image_root, image, file="evaluation set", record=example.id, field=f"prompt[{index}].image")


def check_images(examples: Sequence[EvalExample], image_root: Path | None) -> None:
    for example in examples:
        for i, turn in enumerate(example.prompt):
            if turn.image and not (path := image_path(example, i, image_root)).is_file():
                raise FileNotFoundError(f"record {example.id!r}: image {path} not found")


def endpoint_messages(example: EvalExample, image_root: Path | None) -> list[dict[str, Any]]:
    """OpenAI chat messages; a turn's image becomes a base64 ``image_url`` part before its text."""
    messages: list[dict[str, Any]] = []
    for i, turn in enumerate(example.prompt):
        if not turn.image:
            messages.append(turn.as_message())
            continue
        part = image_part(image_path(example, i, image_root))
        messages.append({"role": turn.role, "content": [part, {"type": "text", "text": turn.content}]})
    return messages


def endpoint_request(example: EvalExample, opts: GenerationSettings, image_root: Path | None) -> ChatRequest:
    """The chat completion asked for ``example``, with the generation's own sampling and stop strings; the
    penalty, top-k, chat template and generation prompt as vLLM's extensions of the OpenAI API (a vLLM server
    takes a request's template with ``--trust-request-chat-template``)."""
    sampling: dict[str, Any] = {
        "temperature": opts.temperature,
        "top_p": opts.top_p if opts.sampling else 1.0,
        "seed": opts.seed,
    }
    if opts.stop:
        sampling["stop"] = list(opts.stop)
    extra: dict[str, Any] = {"repetition_penalty": opts.repetition_penalty}
    if opts.sampling and opts.top_k:
        extra["top_k"] = opts.top_k
    if opts.chat_template is not None:
        extra["chat_template"] = opts.template_text
    if not opts.generation_prompt:
        extra["add_generation_prompt"] = False
    sampling["extra_body"] = extra
    return ChatRequest(tuple(endpoint_messages(example, image_root)), opts.max_new_tokens, "generation", sampling)


def generate_via_endpoint(
    endpoint: GenerationEndpoint,
    examples: Sequence[EvalExample],
    out_path: str | Path,
    opts: GenerationSettings,
    image_root: str | Path | None = None,
    what: str = "replies",
    key: str = "evaluator.generation.max_new_tokens",
) -> GenerationReport:
    """Generate predictions through an OpenAI-compatible chat-completions server (vLLM, rpbench.serve).

    Same file, resume, record format and ``what`` as ``generate_predictions``. Requests go through the judge's
    client (``rpbench.scoring.chat.client``, ``endpoint.client_config``: at most ``concurrency`` at once,
    retried with backoff, counted in the report's ``endpoint_usage``; no cache, since sampled replies must not
    repeat). The API key is read from the environment variable ``api_key_env`` (a placeholder is sent without
    one, as local servers expect; see ``rpbench.scoring.chat.endpoints``). Requests still failing after the
    retries are reported in an EndpointGenerationError once the others are written; a re-run retries only those.
    """
    examples = list(examples)
    by_id = index_examples(examples)
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fingerprint = endpoint_fingerprint(endpoint, opts)
    set_aside = claim(out_path, fingerprint)
    done, truncated = read_predictions(out_path, by_id, repair=True)
    if truncated:
        log.warning(truncated)
    todo = [ex for ex in examples if ex.id not in done]
    root = Path(image_root) if image_root is not None else None
    check_images(todo, root)
    key = api_key(endpoint.base_url, endpoint.api_key_env, "evaluator.endpoint.api_key_env")
    config = endpoint.client_config(opts.progress)
    client = ChatClient(config, api_key=key, label="evaluator.endpoint", role="generation")
    requests = [endpoint_request(ex, opts, root) for ex in todo]
    failures: list[tuple[str, str]] = []
    with out_path.open("a", encoding="utf-8") as f:

        def write(i: int, result: ChatResult) -> None:
            if result.no_content:
                result = replace(result, error=f"endpoint returned no text (finish_reason {result.finish_reason!r})")
            if result.error is not None:
                failures.append((todo[i].id, result.error))
                return
            f.write(dumps(prediction_record(todo[i], opts.reply(result.text or ""))))
            f.flush()

        try:
            client.ask_many(requests, desc=f"generate {what} (endpoint)", on_result=write)
        finally:
            client.close()
    if failures:
        first_id, first_error = failures[0]
        raise EndpointGenerationError(
            f"{len(failures)} of {len(todo)} endpoint requests failed (first: record {first_id!r}: {first_error}); "
            f"{len(todo) - len(failures)} predictions were written to {out_path}; re-run to retry the failed ones"
        )
    merge_predictions(out_path, examples, 1, opts.merge_timeout_s, fingerprint)
    return GenerationReport(
        str(out_path),
        len(examples),
        len(todo),
        len(examples) - len(todo),
        truncated,
        images=image_counts(todo, None),
        endpoint_usage=client.stats.as_dict(),
        set_aside=set_aside,
    )
