"""Generation with a Hugging Face causal LM: decoding options, left padding, stop ids, batched decoding.

Used by evaluation (``rpbench.eval.generate``: the resumable predictions file), by the objectives that
sample (GRPO) and by the local server (``rpbench.serve``). A vision-language model (its tokenizer an
``ImageTextTokenizer``) also takes each prompt's images: the prompt ids hold their expanded image tokens,
and a batch gets the pixel inputs of its rows' images in row order (``batch_inputs``). Qwen2-VL's
multimodal positions skip the left padding (they are computed from the attention mask), so a padded row
generates what it generates alone.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from rpbench.core.progress_bar import progress_bar
from rpbench.core.typed import Problem, Settings
from rpbench.data.chat import ContentText
from rpbench.models.chat_templates import available_templates, load_chat_template
from rpbench.models.vision import is_image_text
from rpbench.models.zero3 import gathered_for_generation, is_partitioned

KV_CACHES = ("dynamic", "static")


@dataclass(frozen=True, kw_only=True)
class GenerationSettings(Settings):
    """Decoding settings (``evaluator.generation``, every value from the YAML; the objectives that sample build
    theirs from their own). ``temperature`` 0 is greedy; otherwise sampling with ``top_p``/``top_k`` (0: off);
    ``repetition_penalty`` (1: off; the RPGBench authors' vLLM runs use 1.05) applies either way.

    The prompt: ``chat_template`` null renders it in the model's own chat template, else in the named one (a
    shipped template or a Jinja file, as ``model.chat_template``; e.g. ``chatml``), for this generation only;
    ``generation_prompt`` false ends it on the last turn, without the assistant header (the RPGBench authors'
    template renders none). The reply (``reply``): the text before the first of the ``stop`` strings (each
    backend also stops generating there), then with ``reply_tag`` (e.g. ``Agent Response``) the text after the
    last ``<tag>`` and before the first ``</tag>``, each where present.

    Only these settings apply: the model's own ``generation_config`` sampling defaults are overridden,
    so results depend on the config alone. ``max_prompt_length``: longer prompts lose history turns from the
    left (the system turn and the last user turn stay; null: none is cut). On a ZeRO-3-partitioned model,
    ``gather_per_batch`` gathers the whole model on every rank once per ``generate`` batch (no collectives per
    token, so ranks generating different lengths never wait on each other); false keeps it partitioned (for a
    model too large for one device) and generates with ``synced_gpus`` (every rank takes part in every
    token's gathers). ``synced_gpus`` null detects that case and FSDP. ``merge_timeout_s``: how long rank 0
    waits for the other ranks' predictions. ``cache``: the KV cache, ``dynamic`` (grows per token) or
    ``static`` (preallocated for prompt + ``max_new_tokens``: fixed shapes, the layout CUDA graphs and
    ``torch.compile`` need; same tokens).
    """

    max_new_tokens: int
    max_prompt_length: int | None
    temperature: float
    top_p: float
    top_k: int
    repetition_penalty: float
    chat_template: str | None
    generation_prompt: bool
    stop: tuple[str, ...]
    reply_tag: str | None
    batch_size: int
    seed: int
    synced_gpus: bool | None
    gather_per_batch: bool
    merge_timeout_s: float
    progress: bool
    cache: str

    def problems(self) -> list[Problem]:
        found: list[Problem] = []
        if self.max_new_tokens < 1:
            found.append(("max_new_tokens", "an integer >= 1"))
        if self.max_prompt_length is not None and self.max_prompt_length < 1:
            found.append(("max_prompt_length", "null or an integer >= 1 (tokens)"))
        if self.temperature < 0:
            found.append(("temperature", "a number >= 0 (0: greedy)"))
        if not 0 < self.top_p <= 1:
            found.append(("top_p", "a share in (0, 1]"))
        if self.top_k < 0:
            found.append(("top_k", "an integer >= 0 (0: off)"))
        if not self.repetition_penalty > 0:
            found.append(("repetition_penalty", "a number > 0 (1: off)"))
        if self.chat_template is not None:
            try:
                load_chat_template(self.chat_template)
            except ValueError:
                shipped = ", ".join(available_templates())
                found.append(("chat_template", f"null (the model's own), one of {shipped} or a Jinja file"))
        if any(not stop for stop in self.stop):
            found.append(("stop", "a list of non-empty strings"))
        if self.reply_tag is not None and (not self.reply_tag or any(c in self.reply_tag for c in "<>/")):
            found.append(("reply_tag", "null or a tag name without <, > or / (e.g. Agent Response)"))
        if self.batch_size < 1:
            found.append(("batch_size", "an integer >= 1"))
        if self.seed < 0:
            found.append(("seed", "an integer >= 0"))
        if self.merge_timeout_s <= 0:
            found.append(("merge_timeout_s", "a number of seconds > 0"))
        if self.cache not in KV_CACHES:
            found.append(("cache", f"one of {', '.join(KV_CACHES)}"))
        return found

    def problems_as(self, names: Mapping[str, str]) -> list[tuple[str, str]]:
        """The problems of options built from other settings (an objective's), as (key, expected) pairs naming
        those settings' keys (``names``: option -> key; an option not in it is named as itself)."""
        return [(names.get(key, key), expected) for key, expected in self.problems()]

    @property
    def sampling(self) -> bool:
        return self.temperature > 0

    @property
    def template_text(self) -> str | None:
        """The Jinja text of ``chat_template`` (None: the model's own)."""
        return None if self.chat_template is None else load_chat_template(self.chat_template)

    def reply(self, completion: str) -> str:
        """The reply in a decoded completion: cut at the first stop string, the text inside the reply tags."""
        for stop in self.stop:
            completion = completion.split(stop, 1)[0]
        if self.reply_tag is not None:
            completion = completion.split(f"</{self.reply_tag}>", 1)[0].split(f"<{self.reply_tag}>")[-1]
        return completion.strip()


def render_prompts(
    tokenizer, conversations: Sequence[Sequence[Mapping[str, Any]]], images: Sequence[Sequence[Any]] | None = None
) -> list[list[int]]:
    """Token ids of each conversation in the chat template, ending with the assistant header. With
    ``images`` (per conversation, in the order its messages show them as ``{"type": "image"}`` parts),
    each image placeholder is expanded to the image's tokens. Contents are text: a control token's string
    in a message is tokenized as ordinary text (``ContentText``)."""
    content = ContentText(tokenizer)
    texts = [
        tokenizer.apply_chat_template(
            [_escaped_message(content, m) for m in c], tokenize=False, add_generation_prompt=True
        )
        for c in conversations
    ]
    if images is not None:
        texts = [tokenizer.expand_image_tokens(text, list(shown)) for text, shown in zip(texts, images, strict=True)]
    return [content.encode(text) for text in texts]


def _escaped_message(content: ContentText, message: Mapping[str, Any]) -> dict[str, Any]:
    """``message`` with its text (a string, or the ``text`` of its content parts) escaped."""
    value = message.get("content")
    if isinstance(value, str):
        return {**message, "content": content.escape(value)}
    if isinstance(value, list):
        parts = [{**p, "text": content.escape(p["text"])} if isinstance(p.get("text"), str) else p for p in value]
        return {**message, "content": parts}
    return dict(message)


def default_stop_ids(model, tokenizer) -> list[int]:
    """The model's generation eos ids (``rpbench.models`` sets them to the end-of-turn ids)."""
    eos = model.generation_config.eos_token_id
    if eos is None:
        eos = tokenizer.eos_token_id
    return [eos] if isinstance(eos, int) else list(eos)


def hf_generation_config(opts: GenerationSettings, stop_ids: Sequence[int], pad_id: int):
    from transformers import GenerationConfig

    sampling = (
        {"temperature": opts.temperature, "top_p": opts.top_p, "top_k": opts.top_k}
        if opts.sampling
        else {"temperature": 1.0, "top_p": 1.0, "top_k": 50}
    )  # neutral values: no warpers, no warnings
    return GenerationConfig(
        max_new_tokens=opts.max_new_tokens,
        do_sample=opts.sampling,
        repetition_penalty=opts.repetition_penalty,
        eos_token_id=list(stop_ids),
        pad_token_id=pad_id,
        **({"stop_strings": list(opts.stop)} if opts.stop else {}),
        **({"cache_implementation": "static"} if opts.cache == "static" else {}),
        **sampling,
    )


def left_pad(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, width - len(row) :] = torch.tensor(row, dtype=torch.long)
        mask[i, width - len(row) :] = 1
    return ids, mask


def batch_inputs(
    tokenizer, rows: Sequence[Sequence[int]], pad_id: int, images: Sequence[Sequence[Any]] | None = None
) -> dict[str, torch.Tensor]:
    """``generate``'s inputs for prompt ``rows``: left-padded ids and attention mask, plus, with ``images``
    (per row; an image-text tokenizer's), the pixel inputs of the rows' images in row order."""
    ids, mask = left_pad(rows, pad_id)
    inputs = {"input_ids": ids, "attention_mask": mask}
    if images is not None:
        if not is_image_text(tokenizer):
            raise ValueError("prompts with images need a vision-language model (an image-text tokenizer)")
        inputs.update(tokenizer.model_image_inputs(ids, [image for row in images for image in row]))
    return inputs


def decode_completion(tokenizer, ids: Sequence[int], stop_ids: Sequence[int]) -> str:
    """Text of a completion up to (not including) its first stop token."""
    ids = list(ids)
    cut = next((i for i, t in enumerate(ids) if t in stop_ids), len(ids))
    return tokenizer.decode(ids[:cut], skip_special_tokens=True).strip()


def gathers_per_batch(model, opts: GenerationSettings) -> bool:
    """Whether each ``generate`` batch runs on the whole model gathered once (ZeRO-3 with ``gather_per_batch``):
    every rank then makes the same number of batches."""
    return opts.gather_per_batch and is_partitioned(model)


def synced_gpus_needed(model, opts: GenerationSettings, world_size: int) -> bool:
    """Whether ``generate`` syncs the ranks every token: set by ``synced_gpus``, or needed for a model that
    stays partitioned while generating (ZeRO-3 without ``gather_per_batch``, FSDP)."""
    if opts.synced_gpus is not None:
        return opts.synced_gpus and world_size > 1
    from transformers.distributed.fsdp import is_fsdp_managed_module
    from transformers.integrations.deepspeed import is_deepspeed_zero3_enabled

    if world_size == 1:
        return False
    if is_partitioned(model):  # under Lightning no HfDeepSpeedConfig exists: the parameters tell
        return not opts.gather_per_batch
    return is_deepspeed_zero3_enabled() or is_fsdp_managed_module(model)


def generate_batches(
    model,
    tokenizer,
    prompts: Sequence[Sequence[int]],
    opts: GenerationSettings,
    stop_ids: Sequence[int],
    *,
    min_batches: int = 0,
    synced_gpus: bool = False,
    desc: str = "generate",
    images: Sequence[Sequence[Any]] | None = None,
) -> Iterator[tuple[list[int], list[str]]]:
    """Yield (prompt indices, completions) batch by batch, longest prompts first.

    ``images``: per prompt, the images its image tokens stand for, in order (a vision-language model's).
    With ``min_batches`` the loop continues with throw-away batches until that many ``generate`` calls
    were made (ranks under ``synced_gpus`` or ``gathers_per_batch`` must make the same number). Sampling
    reseeds torch with ``seed + batch number`` before each batch.
    """
    if images is not None and len(images) != len(prompts):
        raise ValueError(f"{len(images)} image lists for {len(prompts)} prompts")
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stop_ids[0]
    config = hf_generation_config(opts, stop_ids, pad_id)
    order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))
    batches = [order[s : s + opts.batch_size] for s in range(0, len(order), opts.batch_size)]
    filler = [list(prompts[order[-1]]) if prompts else tokenizer("hi", add_special_tokens=False)["input_ids"]]
    filler_images = [images[order[-1]]] if images and prompts else None
    device = next(model.parameters()).device
    gather = gathers_per_batch(model, opts)
    was_training = model.training
    model.eval()
    try:
        with progress_bar(desc=desc, total=len(prompts), unit="completion", disable=not opts.progress) as bar:
            for number in range(max(len(batches), min_batches)):
                batch = batches[number] if number < len(batches) else []
                rows = [prompts[i] for i in batch] or filler
                shown = ([images[i] for i in batch] or filler_images) if images is not None else None
                inputs = batch_inputs(tokenizer, rows, pad_id, shown)
                width = inputs["input_ids"].shape[1]
                if opts.sampling:
                    torch.manual_seed(opts.seed + number)
                with torch.no_grad(), gathered_for_generation(model, gather):
                    out = model.generate(
                        **{name: value.to(device) for name, value in inputs.items()},
                        generation_config=config,
                        synced_gpus=synced_gpus,
                        **({"tokenizer": tokenizer} if opts.stop else {}),  # stop strings are matched on text
                    )
                completions = [decode_completion(tokenizer, row, stop_ids) for row in out[:, width:].tolist()]
                if batch:
                    bar.update(len(batch))
                    yield batch, completions[: len(batch)]
    finally:
        model.train(was_training)
