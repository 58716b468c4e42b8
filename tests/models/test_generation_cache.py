"""The static KV cache gives the tokens of the plain (dynamic) one: greedy, batched, left-padded."""

import pytest
import torch

from rpbench.models import load
from rpbench.models.generation import hf_generation_config, left_pad, render_prompts

CONVERSATIONS = [
    [{"role": "system", "content": "You are Sherlock Holmes."}, {"role": "user", "content": "Who are you?"}],
    [{"role": "user", "content": "Hi"}],
    [{"role": "user", "content": "Describe the fog over London in the evening, in detail, please."}],
]


@pytest.mark.parametrize("family", ["qwen2", "llama"])
def test_static_cache_greedy_generation_equals_the_dynamic_cache(family, tiny_model, generation_options):
    model, tokenizer = load(tiny_model(family))
    ids, mask = left_pad(render_prompts(tokenizer, CONVERSATIONS), tokenizer.pad_token_id)
    assert (mask == 0).any()  # left padding is exercised
    outputs = {}
    for cache in ("dynamic", "static"):
        opts = generation_options(max_new_tokens=16, cache=cache)
        config = hf_generation_config(opts, [tokenizer.eos_token_id], tokenizer.pad_token_id)
        assert config.cache_implementation == (None if cache == "dynamic" else "static")
        with torch.no_grad():
            outputs[cache] = model.eval().generate(input_ids=ids, attention_mask=mask, generation_config=config)
    assert outputs["dynamic"].shape[1] > ids.shape[1]  # something was generated
    assert torch.equal(outputs["static"], outputs["dynamic"])


def test_unknown_cache_is_refused(generation_options):
    with pytest.raises(ValueError, match=r"evaluator\.generation\.cache='paged': expected one of dynamic, static"):
        generation_options(cache="paged")
