"""RPGBench's decoding presets (conf/evaluator/decoding/): what each backend is given (local Hugging Face
generation on a real tiny Llama, vLLM's sampling arguments, the JSON body a real 127.0.0.1 server receives)
and the reply read from a generated completion (stop string, reply tags)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from omegaconf import OmegaConf

from rpbench.data.chat import ChatRenderer
from rpbench.data.records import EvalExample, Turn
from rpbench.eval.generate import generate_predictions, generate_via_endpoint
from rpbench.models.chat_templates import load_chat_template
from rpbench.models.generation import GenerationSettings, default_stop_ids
from rpbench.models.vllm_engine import sampling_kwargs

STOP = "</Agent Response>"
# A real model's config: no tiny tuning overrides the preset's decoding
REAL_MODEL = "model=llama3.1-8b-instruct"


def decoding(compose, *overrides: str) -> tuple[GenerationSettings, GenerationSettings]:
    """evaluator=rpgbench's policy and reasoner options as `python run.py evaluator=rpgbench <overrides>` sets them."""
    cfg = compose("evaluator=rpgbench", REAL_MODEL, *overrides)
    ev = OmegaConf.to_container(cfg.evaluator, resolve=True)
    policy = GenerationSettings.parse({**ev["generation"], "progress": False}, "evaluator.generation")
    reasoning = ev["generalization"]["reasoning"]
    reasoner = GenerationSettings.parse({**reasoning, "progress": False}, "evaluator.generalization.reasoning")
    return policy, reasoner


def example() -> EvalExample:
    turns = (Turn("system", "Play Ada."), Turn("user", "Hello there, who are you?"))
    return EvalExample(id="r1", prompt=turns, reference="I am Ada.", task="IDTest")


@pytest.fixture(scope="module")
def tiny_llama(tiny_model):
    from rpbench.models import load

    return load(tiny_model("llama", tiny={"initializer_range": 0.2}))


def test_the_presets_set_the_authors_values_and_the_default_keeps_each_model_s_template(compose):
    policy, reasoner = decoding(compose, "evaluator/decoding=authors")
    for opts in (policy, reasoner):
        assert (opts.temperature, opts.repetition_penalty, opts.stop) == (0.0, 1.05, (STOP,))
        assert (opts.chat_template, opts.generation_prompt) == ("chatml", False)
    assert (policy.reply_tag, reasoner.reply_tag) == ("Agent Response", None)
    default, default_reasoner = decoding(compose)
    assert default == replace(policy, chat_template=None, generation_prompt=True)
    assert default_reasoner == replace(reasoner, chat_template=None, generation_prompt=True)
    plain, plain_reasoner = decoding(compose, "evaluator/decoding=plain")
    for opts in (plain, plain_reasoner):
        assert (opts.repetition_penalty, opts.stop, opts.reply_tag, opts.chat_template) == (1.0, (), None, None)


def test_chatml_on_a_llama_tokenizer_is_the_authors_text_prompt(tiny_llama):
    """The prompt vLLM builds from the authors' text: BOS, then ChatML turns as plain text (Llama-3 has no
    ChatML tokens), no assistant header, no Llama header or think block."""
    _, tok = tiny_llama
    renderer = ChatRenderer(tok, None, 4096, chat_template=load_chat_template("chatml"))
    ids = renderer.fit_prompt(example().prompt, generation_prompt=False).input_ids
    text = "<|im_start|>system\nPlay Ada.<|im_end|>\n<|im_start|>user\nHello there, who are you?<|im_end|>\n"
    assert ids == tok(text)["input_ids"]  # a text prompt as vLLM tokenizes it (special tokens added)
    assert ids[0] == tok.bos_token_id and "<|im_start|>" not in tok.convert_ids_to_tokens(ids)
    with_header = renderer.fit_prompt(example().prompt).input_ids
    assert with_header == tok(text + "<|im_start|>assistant\n")["input_ids"]


def test_local_generation_uses_the_preset_template_penalty_and_stop_string(compose, tiny_llama, tmp_path):
    """What generate_predictions writes is model.generate on the ChatML prompt with the penalty, cut before a
    stop string taken from the unstopped reply."""
    model, tok = tiny_llama
    policy, _ = decoding(compose, "evaluator/decoding=authors")
    policy = replace(policy, max_new_tokens=16, max_prompt_length=None)
    text = "<|im_start|>system\nPlay Ada.<|im_end|>\n<|im_start|>user\nHello there, who are you?<|im_end|>\n"
    ids = tok(text, return_tensors="pt")
    stops = default_stop_ids(model, tok)
    out = model.generate(**ids, max_new_tokens=16, do_sample=False, repetition_penalty=1.05)
    row = out[0, ids["input_ids"].shape[1] :].tolist()
    free = tok.decode(row[: next((i for i, t in enumerate(row) if t in stops), len(row))], skip_special_tokens=True)
    stop = next(w for w in free.split()[1:] if w.isascii() and w.isalpha())  # a word after the first
    generate_predictions(model, tok, [example()], tmp_path / "p.jsonl", replace(policy, stop=(stop,)))
    [record] = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text().splitlines()]
    assert record["prediction"] == free.split(stop, 1)[0].strip() and stop not in record["prediction"]


def test_vllm_is_given_the_preset_sampling_and_stop_string(compose):
    policy, reasoner = decoding(compose, "evaluator/decoding=authors")
    kwargs = sampling_kwargs(policy, [7], seed=3)
    assert kwargs == {
        "n": 1,
        "max_tokens": 256,
        "temperature": 0.0,
        "top_p": 1.0,
        "top_k": -1,
        "repetition_penalty": 1.05,
        "stop": [STOP],
        "stop_token_ids": [7],
        "seed": 3,
        "skip_special_tokens": False,
    }
    assert sampling_kwargs(reasoner, [7])["max_tokens"] == 2048


def test_the_endpoint_gets_the_preset_and_the_reply_is_read_inside_the_tags(
    compose, tmp_path, chat_stub, generation_endpoint
):
    """The body a real server receives; its reply (text around the tags, the stop string and after it) is
    cut to what the authors keep: the policy the text inside the tags, the reasoner all before the stop."""
    policy, reasoner = decoding(compose, "evaluator/decoding=authors")
    said = "<|im_start|>assistant\n<Agent Response> I am Ada, the baker. </Agent Response>\nmore"
    with chat_stub(lambda body: said) as server:
        endpoint = generation_endpoint(server.url, "m")
        generate_via_endpoint(endpoint, [example()], tmp_path / "p.jsonl", policy)
        generate_via_endpoint(endpoint, [example()], tmp_path / "r.jsonl", reasoner)
        bodies = server.requests
    for body in bodies:
        assert (body["temperature"], body["top_p"], body["repetition_penalty"]) == (0.0, 1.0, 1.05)
        assert body["stop"] == [STOP] and body["add_generation_prompt"] is False
        assert body["chat_template"] == load_chat_template("chatml")
    [policy_row] = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text().splitlines()]
    [reasoner_row] = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert policy_row["prediction"] == "I am Ada, the baker."
    assert reasoner_row["prediction"] == "<|im_start|>assistant\n<Agent Response> I am Ada, the baker."


def test_the_model_s_own_template_sends_no_template_to_the_endpoint(compose, tmp_path, chat_stub, generation_endpoint):
    policy, _ = decoding(compose)
    with chat_stub(lambda body: "<Agent Response>Hi</Agent Response>") as server:
        generate_via_endpoint(generation_endpoint(server.url, "m"), [example()], tmp_path / "p.jsonl", policy)
        [body] = server.requests
    assert "chat_template" not in body and "add_generation_prompt" not in body and body["stop"] == [STOP]
