"""rpbench's OpenAI-compatible chat-completions server (HTTP on 127.0.0.1) for any rpbench model config.

    python -m rpbench.serve model=tiny-qwen2 port=0          # port 0: a free port; the URL is printed
    python run.py task=serve model=qwen2.5-7b-instruct model.dtype=bfloat16 serve.max_batch_size=16

Endpoints: ``POST /v1/chat/completions`` (``stream=true``: OpenAI's server-sent chunks as tokens are
generated, usage in a last chunk with ``stream_options.include_usage``; a vision-language model also takes
OpenAI image parts as base64 data URLs, never files or URLs), ``POST /v1/completions`` (a raw prompt, no chat
template: a string is tokenized as the tokenizer reads it, so text spelling a control token becomes that
token; ``echo`` and ``logprobs`` with ``max_tokens=0`` score the prompt, as lm-eval's ``local-completions``
needs; ``stop`` strings cut the text), ``GET /v1/models``, ``GET /health``. Requests are checked as OpenAI
checks them (400, or 404 for another model name) and queue first in, first out (503 with Retry-After beyond
``max_queue``).

The modules: ``settings`` (``ServeSettings``, the ``serve`` group; ``ServeRun``, task=serve), ``model`` (the
served model, its names and log-probabilities), ``protocol`` (the wire format), ``request_checks`` (requests
checked), ``batching`` (the queue and the generation thread), ``streaming`` (per-row stopping criteria,
server-sent events), ``server`` (``ChatServer``, the aiohttp application, with its one hook
``answer_before_model`` for a subclass to answer a request before the model), ``running`` (in a thread:
``serve_in_thread``, ``local_judge``; until stopped: ``serve_run``), ``__main__`` (the command line).
"""
