"""Chat and text-completion requests checked as OpenAI checks them, before anything reaches the model."""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rpbench.serve.protocol import BadRequest, Sampling, UnknownModel, is_int, message_text, number

# /v1/completions as OpenAI's: the most alternatives ``logprobs`` may ask per token, max_tokens when none is
# named, the most ``stop`` strings.
MAX_LOGPROBS = 5
DEFAULT_COMPLETION_TOKENS = 16
MAX_STOPS = 4
DATA_URL = re.compile(r"data:image/[\w.+-]+;base64,(?P<data>.*)", re.DOTALL)


@dataclass(frozen=True)
class Accepts:
    """What the served model accepts: the names it answers to (the served name, then its identity), images
    (with the placeholder its tokenizer writes for one, which a message's text may not hold), its context
    length (prompt plus reply) and vocabulary size, and the most prompts one completion request may send."""

    names: tuple[str, str]
    takes_images: bool
    image_token: str | None
    context: int
    vocab: int
    max_prompts: int


@dataclass(frozen=True)
class ChatJob:
    """A checked /v1/chat/completions request: its conversation (chat-template messages), its images in order,
    sampling (max_tokens 0: the request named none), whether to stream and to send usage in a last chunk."""

    conversation: list[dict[str, Any]]
    images: list[Any]
    sampling: Sampling
    stream: bool
    include_usage: bool


@dataclass(frozen=True)
class CompletionJob:
    """A checked /v1/completions request: its prompts as token ids, sampling (max_tokens 0: score only),
    whether to echo the prompt, the top alternatives to report per token (None: no logprobs), stop strings."""

    prompts: list[list[int]]
    sampling: Sampling
    echo: bool
    logprobs: int | None
    stop: tuple[str, ...]


def check_model(body: dict[str, Any], accepts: Accepts) -> None:
    model = body.get("model")
    if model is not None and model not in accepts.names:
        raise UnknownModel(f"The model {model!r} does not exist: this server serves {accepts.names[0]!r}")


def sampling_values(body: dict[str, Any]) -> tuple[float, float]:
    """The request's temperature and top_p (OpenAI's defaults, 1, when absent)."""
    temperature, top_p = number(body, "temperature", 1.0), number(body, "top_p", 1.0)
    if not 0 <= temperature <= 2:
        raise BadRequest(f"temperature must be between 0 and 2, got {temperature!r}")
    if not 0 < top_p <= 1:
        raise BadRequest(f"top_p must be in (0, 1], got {top_p!r}")
    return temperature, top_p


def chat_request(body: Any, accepts: Accepts) -> ChatJob:
    """A chat request body checked (BadRequest, UnknownModel), its messages converted."""
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    check_model(body, accepts)
    if not isinstance(body.get("stream", False), bool):
        raise BadRequest(f"stream must be true or false, got {body['stream']!r}")
    if body.get("stream_options") is not None and not (body.get("stream") and isinstance(body["stream_options"], dict)):
        raise BadRequest("stream_options: an object, only with stream=true")
    if body.get("n", 1) != 1:
        raise BadRequest("only n=1 is supported")
    if body.get("stop") is not None:
        raise BadRequest("'stop' is not supported: generation stops at the model's end-of-turn token")
    if body.get("chat_template") is not None or body.get("add_generation_prompt", True) is not True:
        raise BadRequest(
            "'chat_template' and 'add_generation_prompt' are not supported: a prompt is the served model's "
            "own template, ending on its assistant header"
        )
    if number(body, "repetition_penalty", 1.0) != 1.0:
        raise BadRequest("'repetition_penalty' is not supported (only 1, no penalty)")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty list")
    parsed = [chat_message(i, m, accepts) for i, m in enumerate(messages)]
    conversation = [message for message, _ in parsed]
    images = [image for _, shown in parsed for image in shown]
    placeholder = accepts.image_token if accepts.takes_images else None
    if placeholder and any(placeholder in message_text(m) for m in conversation):
        raise BadRequest(f"messages: text holds the image placeholder {placeholder!r}; send images as image_url parts")
    key = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    max_tokens = body.get(key)
    if max_tokens is not None and (not is_int(max_tokens) or max_tokens < 1):
        raise BadRequest(f"{key} must be an integer >= 1, got {max_tokens!r}")
    temperature, top_p = sampling_values(body)
    stream = bool(body.get("stream"))
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    return ChatJob(conversation, images, Sampling(max_tokens or 0, temperature, top_p), stream, include_usage)


def chat_message(index: int, message: Any, accepts: Accepts) -> tuple[dict[str, Any], list[Any]]:
    """A chat-template message and its decoded images: text content as one string; with images, the
    parts in order (``{"type": "image"}`` where an image stands)."""
    if not isinstance(message, dict) or message.get("role") not in ("system", "user", "assistant"):
        raise BadRequest(f"messages[{index}]: an object with role system|user|assistant")
    content = message.get("content")
    images: list[Any] = []
    if isinstance(content, list):
        if any(isinstance(p, dict) and p.get("type") == "image_url" for p in content) and not accepts.takes_images:
            raise BadRequest(f"messages[{index}]: images are not supported ({accepts.names[0]} is served text-only)")
        parts: list[dict[str, str]] = []
        for position, part in enumerate(content):
            where = f"messages[{index}].content[{position}]"
            if isinstance(part, dict) and part.get("type") == "image_url":
                images.append(data_url_image(part.get("image_url"), where))
                parts.append({"type": "image"})
            elif isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
                parts.append({"type": "text", "text": part["text"]})
            else:
                kinds = "{type: text, text: str}" + (" or {type: image_url, ...}" if accepts.takes_images else "")
                raise BadRequest(f"{where}: parts must be {kinds}")
        if not images:
            return {"role": message["role"], "content": "".join(p["text"] for p in parts)}, []
        return {"role": message["role"], "content": parts}, images
    if not isinstance(content, str):
        raise BadRequest(f"messages[{index}].content: a string or a list of content parts")
    return {"role": message["role"], "content": content}, images


def data_url_image(image_url: Any, where: str):
    """The image of an ``image_url`` part: a base64 data URL, decoded (BadRequest naming ``where`` otherwise)."""
    from rpbench.models.vision import ImageError, image_from_bytes

    url = image_url.get("url") if isinstance(image_url, dict) else None
    if not isinstance(url, str):
        raise BadRequest(f"{where}.image_url: an object with a url (a data:image/...;base64,... URL)")
    match = DATA_URL.fullmatch(url)
    if match is None:
        raise BadRequest(
            f"{where}.image_url.url: only base64 data URLs (data:image/<type>;base64,...) are accepted; this "
            f"server fetches no URLs and reads no files for its clients (got {url[:40]!r})"
        )
    try:
        data = base64.b64decode(match["data"], validate=True)
    except binascii.Error as error:
        raise BadRequest(f"{where}.image_url.url: not valid base64 ({error})") from error
    try:
        return image_from_bytes(data, f"{where}.image_url")
    except ImageError as error:
        raise BadRequest(str(error)) from error


def completion_request(body: Any, accepts: Accepts, tokenize: Callable[[str], list[int]]) -> CompletionJob:
    """A /v1/completions body checked (BadRequest, UnknownModel), its prompts as token ids (a text prompt is
    ``tokenize``d as given: no special tokens added)."""
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    check_model(body, accepts)
    if body.get("stream"):
        raise BadRequest("stream=true is not supported on /v1/completions")
    if body.get("n", 1) != 1 or body.get("best_of", 1) != 1:
        raise BadRequest("only n=1 and best_of=1 are supported")
    echo = body.get("echo", False)
    if not isinstance(echo, bool):
        raise BadRequest(f"echo must be true or false, got {echo!r}")
    logprobs = body.get("logprobs")
    if logprobs is not None and (not is_int(logprobs) or not 0 <= logprobs <= MAX_LOGPROBS):
        raise BadRequest(f"logprobs must be an integer from 0 to {MAX_LOGPROBS}, got {logprobs!r}")
    max_tokens = body.get("max_tokens", DEFAULT_COMPLETION_TOKENS)
    if not is_int(max_tokens) or max_tokens < 0 or (max_tokens == 0 and not echo):
        raise BadRequest(f"max_tokens must be an integer >= 1 (0 only with echo=true), got {max_tokens!r}")
    stop = body.get("stop")
    if stop is not None and not isinstance(stop, str | list):
        raise BadRequest(f"stop: a non-empty string or a list of up to {MAX_STOPS}, got {stop!r}")
    stops = (stop,) if isinstance(stop, str) else tuple(stop or ())
    if len(stops) > MAX_STOPS or not all(isinstance(s, str) and s for s in stops):
        raise BadRequest(f"stop: a non-empty string or a list of up to {MAX_STOPS}, got {stop!r}")
    temperature, top_p = sampling_values(body)
    if body.get("seed") is not None and not is_int(body["seed"]):
        raise BadRequest(f"seed must be an integer, got {body['seed']!r}")
    prompts = prompt_ids(body.get("prompt"), accepts.vocab, tokenize)
    if len(prompts) > accepts.max_prompts:
        raise BadRequest(f"prompt: at most {accepts.max_prompts} prompts per request, got {len(prompts)}")
    for i, ids in enumerate(prompts):
        if not ids or len(ids) + max_tokens > accepts.context:
            raise BadRequest(
                f"prompt[{i}]: {len(ids)} tokens plus max_tokens={max_tokens} must be between 1 and this "
                f"model's maximum context length, {accepts.context} tokens"
            )
    return CompletionJob(prompts, Sampling(max_tokens, temperature, top_p), echo, logprobs, stops)


def prompt_ids(prompt: Any, vocab: int, tokenize: Callable[[str], list[int]]) -> list[list[int]]:
    """``prompt`` as a list of token-id prompts: a string, a list of strings, token ids or lists of them."""
    if isinstance(prompt, str) or (isinstance(prompt, list) and prompt and all(is_int(t) for t in prompt)):
        prompt = [prompt]
    if not isinstance(prompt, list) or not prompt:
        raise BadRequest("prompt: a string, a list of strings, a list of token ids, or a list of such lists")
    out = []
    for i, one in enumerate(prompt):
        if isinstance(one, str):
            out.append(tokenize(one))
        elif isinstance(one, list) and all(is_int(t) and 0 <= t < vocab for t in one):
            out.append(list(one))
        else:
            raise BadRequest(f"prompt[{i}]: a string or a list of token ids in [0, {vocab})")
    return out
