"""Packed and padded forwards against separate forwards, and chunked log-probs against full logits."""

import functools
import itertools

import pytest
import torch

from rpbench.data.collate import packed_collate, pad_collate
from rpbench.models import load
from rpbench.models.forward import (
    fused_linear_cross_entropy,
    labelled_logps,
    model_inputs,
    sequence_logps,
    supervised_nll_sum,
)

X = -100
LENGTHS = (7, 1, 12, 5, 9)
FAMILY_ATTN = [(family, attn) for family in ("qwen2", "llama") for attn in ("sdpa", "eager")]


@pytest.fixture(scope="module")
def tiny(tiny_settings):
    @functools.cache
    def tiny(family: str, attn: str, lora: bool = False):
        adapters = {"r": 4, "alpha": 8, "target_modules": ("q_proj", "v_proj")} if lora else None
        cfg = tiny_settings(family, attn_implementation=attn, tiny={"tie_word_embeddings": False}, lora=adapters)
        model, tokenizer = load(cfg)
        if lora:  # LoRA B starts at zero; make the adapters matter
            with torch.no_grad():
                for name, param in model.named_parameters():
                    if "lora_B" in name:
                        param.normal_(0, 0.1)
        return model.eval(), tokenizer

    return tiny


def random_samples(vocab_size: int, seed: int = 0, labelled: float = 0.7):
    g = torch.Generator().manual_seed(seed)
    samples = []
    for n in LENGTHS:
        ids = torch.randint(0, vocab_size, (n,), generator=g)
        keep = torch.rand(n, generator=g) < labelled
        samples.append({"input_ids": ids.tolist(), "labels": torch.where(keep, ids, X).tolist()})
    return samples


def batch_of(layout: str, samples, pad_token_id: int):
    if layout == "packed":
        return packed_collate(samples)
    return pad_collate(samples, pad_token_id, padding_side=layout, pad_to_multiple_of=8)


def naive_labelled_logps(model, batch):
    """Peer implementation: full [B, T, V] logits from the model's own forward, log_softmax, gather."""
    inputs = model_inputs(batch, model.config._attn_implementation)
    logits = model(**inputs).logits[:, :-1].float()
    targets = batch["labels"][:, 1:]
    selected = targets != X
    logps = logits.log_softmax(-1).gather(-1, targets.clamp(min=0)[..., None]).squeeze(-1)
    return logps[selected]


@pytest.mark.parametrize(("family", "attn"), FAMILY_ATTN)
@pytest.mark.parametrize("layout", ["packed", "left", "right"])
def test_batched_equals_separate_forwards(family, attn, layout, tiny):
    model, tokenizer = tiny(family, attn)
    samples = random_samples(len(tokenizer), labelled=1.0)
    with torch.no_grad():
        together = labelled_logps(model, batch_of(layout, samples, tokenizer.pad_token_id), chunk_size=4)
        alone = [labelled_logps(model, pad_collate([sample], tokenizer.pad_token_id)) for sample in samples]
    expected = torch.cat([out.token_logps for out in alone])
    expected_index = torch.cat([torch.full((out.n_tokens,), k) for k, out in enumerate(alone)])
    assert together.n_tokens == sum(n - 1 for n in LENGTHS) == len(expected)
    assert together.n_sequences == len(samples)
    torch.testing.assert_close(together.token_logps, expected, atol=1e-5, rtol=0)
    assert together.sequence_index.tolist() == expected_index.tolist()


@pytest.mark.parametrize("family", ["qwen2", "llama"])
def test_without_the_block_mask_packed_samples_leak(family, tiny):
    """The comparison above can fail: with position ids alone (the cache transformers builds by
    default disables its packed-sequence detection) or a plain causal mask, samples see each other."""
    model, tokenizer = tiny(family, "sdpa")
    samples = random_samples(len(tokenizer), labelled=1.0)
    batch = packed_collate(samples)
    with torch.no_grad():
        alone = torch.cat([model(torch.tensor([s["input_ids"]])).logits[0] for s in samples])
        isolated = model(**model_inputs(batch, "sdpa")).logits[0]
        position_ids_only = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"]).logits[0]
        plain_causal = model(**{**model_inputs(batch, "sdpa"), "attention_mask": torch.ones_like(batch["input_ids"])})
    torch.testing.assert_close(isolated, alone, atol=1e-5, rtol=0)
    assert (position_ids_only - alone).abs().max() > 1e-2
    assert (plain_causal.logits[0] - alone).abs().max() > 1e-2


@pytest.mark.parametrize(("family", "attn"), [("qwen2", "sdpa"), ("llama", "eager")])
@pytest.mark.parametrize("layout", ["packed", "left", "right"])
def test_labelled_logps_and_gradients_match_full_logits(family, attn, layout, tiny):
    model, tokenizer = tiny(family, attn)
    batch = batch_of(layout, random_samples(len(tokenizer), seed=1), tokenizer.pad_token_id)
    out = labelled_logps(model, batch, chunk_size=5)
    expected = naive_labelled_logps(model, batch)
    assert out.n_tokens == len(expected) > 5
    torch.testing.assert_close(out.token_logps, expected, atol=1e-5, rtol=0)

    weights = torch.rand(out.n_tokens, generator=torch.Generator().manual_seed(0))
    grads = []
    for logps in (out.token_logps, expected):
        model.zero_grad()
        (weights * logps).sum().backward()
        grads.append({name: p.grad.clone() for name, p in model.named_parameters()})
    for name, grad in grads[0].items():
        assert torch.isfinite(grad).all(), name
        torch.testing.assert_close(grad, grads[1][name], atol=1e-5, rtol=1e-4, msg=name)
    model.zero_grad()


@pytest.mark.parametrize("layout", ["packed", "right"])
def test_sequence_sums_and_nll(layout, tiny):
    model, tokenizer = tiny("qwen2", "sdpa")
    samples = random_samples(len(tokenizer), seed=2)
    batch = batch_of(layout, samples, tokenizer.pad_token_id)
    with torch.no_grad():
        sums, counts = sequence_logps(model, batch, chunk_size=3)
        nll, n_tokens = supervised_nll_sum(model, batch)
        per_sample = [naive_labelled_logps(model, pad_collate([s], tokenizer.pad_token_id)) for s in samples]
    assert counts.tolist() == [len(p) for p in per_sample]
    assert counts.tolist() == [sum(label != X for label in s["labels"][1:]) for s in samples]
    torch.testing.assert_close(sums, torch.stack([p.sum() for p in per_sample]), atol=1e-4, rtol=0)
    assert n_tokens == sum(counts.tolist())
    torch.testing.assert_close(nll, -sums.sum(), atol=1e-4, rtol=0)


def test_unlabelled_batch_gives_zero_loss_and_zero_gradients(tiny):
    """A loss-free repeat batch still touches every parameter, so distributed ranks stay in step."""
    model, tokenizer = tiny("llama", "sdpa")
    samples = [{**s, "labels": [X] * len(s["labels"])} for s in random_samples(len(tokenizer))]
    model.zero_grad(set_to_none=True)
    nll, n_tokens = supervised_nll_sum(model, packed_collate(samples))
    nll.backward()
    assert n_tokens == 0 and nll.item() == 0
    head = model.get_output_embeddings().weight
    assert head.grad is not None and not head.grad.any()
    model.zero_grad()


def test_peft_model_uses_its_adapters(tiny):
    model, tokenizer = tiny("qwen2", "sdpa", lora=True)
    batch = packed_collate(random_samples(len(tokenizer), seed=3))
    out = labelled_logps(model, batch, chunk_size=4)
    torch.testing.assert_close(out.token_logps, naive_labelled_logps(model, batch), atol=1e-5, rtol=0)
    with model.disable_adapter(), torch.no_grad():
        without_adapters = labelled_logps(model, batch).token_logps
    assert (without_adapters - out.token_logps).abs().max() > 1e-3
    model.zero_grad(set_to_none=True)
    out.token_logps.sum().backward()
    lora_grads = [p.grad for name, p in model.named_parameters() if "lora_" in name]
    assert lora_grads and all(g is not None and g.any() for g in lora_grads)


def test_rejects_models_that_transform_logits(tiny_model):
    model, tokenizer = load(tiny_model())
    model.config.final_logit_softcapping = 30.0
    with pytest.raises(ValueError, match="final_logit_softcapping"):
        labelled_logps(model, packed_collate(random_samples(len(tokenizer))))


def test_packed_batch_rejects_a_backend_without_isolation():
    with pytest.raises(ValueError, match="flex_attention"):
        model_inputs(packed_collate(random_samples(100)), "flex_attention")


def varlen_reference_attention(
    module,
    query,
    key,
    value,
    attention_mask,
    scaling=None,
    dropout=0.0,
    cu_seq_lens_q=None,
    cu_seq_lens_k=None,
    max_length_q=None,
    max_length_k=None,
    **kwargs,
):
    """Peer of flash-attention's varlen kernel for CPU: causal attention within each cu_seq_lens segment.

    Takes [B, H, T, D] like every transformers attention function and returns [B, T, H, D].
    """
    assert attention_mask is None, "the varlen path must not get a dense mask"
    total = query.shape[2]
    bounds = [0, total] if cu_seq_lens_q is None else cu_seq_lens_q.tolist()
    if cu_seq_lens_q is not None:
        assert torch.equal(cu_seq_lens_q, cu_seq_lens_k) and cu_seq_lens_q.dtype == torch.int32
        assert max_length_q == max_length_k == max(e - s for s, e in itertools.pairwise(bounds))
    groups = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(groups, 1), value.repeat_interleave(groups, 1)
    out = torch.cat(
        [
            torch.nn.functional.scaled_dot_product_attention(
                query[:, :, s:e], key[:, :, s:e], value[:, :, s:e], is_causal=True, scale=scaling
            )
            for s, e in itertools.pairwise(bounds)
        ],
        dim=2,
    )
    return out.transpose(1, 2).contiguous(), None


def test_flash_branch_passes_varlen_kwargs_that_isolate_samples(tiny_model):
    """CPU check of the flash_attention_2 plumbing: the kernel is swapped for a reference that uses
    only cu_seq_lens; transformers' own flash mask function and kwargs routing stay real."""
    import inspect

    from transformers.modeling_flash_attention_utils import _flash_attention_forward
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    batch = packed_collate(random_samples(100))
    varlen_kwargs = set(model_inputs(batch, "flash_attention_2")) - {"input_ids", "position_ids", "use_cache"}
    assert varlen_kwargs == {"cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k"}
    assert varlen_kwargs <= set(inspect.signature(_flash_attention_forward).parameters)

    model, tokenizer = load(tiny_model("llama"))
    with torch.no_grad():
        samples = random_samples(len(tokenizer), seed=6, labelled=1.0)
        expected = torch.cat([labelled_logps(model, pad_collate([s], 0)).token_logps for s in samples])
        ALL_ATTENTION_FUNCTIONS["flash_attention_2"] = varlen_reference_attention
        model.config._attn_implementation = "flash_attention_2"
        try:
            packed = labelled_logps(model, packed_collate(samples)).token_logps
        finally:
            del ALL_ATTENTION_FUNCTIONS["flash_attention_2"]
    torch.testing.assert_close(packed, expected, atol=1e-5, rtol=0)


def _flash_attn_available() -> bool:
    try:
        import flash_attn  # noqa: F401
    except ImportError:
        return False
    return torch.cuda.is_available()


@pytest.mark.gpu
@pytest.mark.skipif(not _flash_attn_available(), reason="needs CUDA and the flash-attn package")
@pytest.mark.parametrize("family", ["qwen2", "llama"])
def test_flash_attention_varlen_packed_equals_separate(family, tiny_model):
    model, tokenizer = load(tiny_model(family, attn_implementation="flash_attention_2", dtype="bfloat16"))
    model = model.cuda().eval()
    samples = random_samples(len(tokenizer), seed=4, labelled=1.0)

    def on_cuda(batch):
        return {k: v.cuda() if isinstance(v, torch.Tensor) else v for k, v in batch.items()}

    with torch.no_grad():
        packed = labelled_logps(model, on_cuda(packed_collate(samples)))
        alone = torch.cat(
            [labelled_logps(model, on_cuda(pad_collate([s], tokenizer.pad_token_id))).token_logps for s in samples]
        )
    assert "attention_mask" not in model_inputs(packed_collate(samples), "flash_attention_2")
    torch.testing.assert_close(packed.token_logps, alone, atol=2e-2, rtol=0)


def _largest_saved_vocab_tensor(fn, vocab_size: int) -> int:
    """Rows of the largest vocabulary-wide tensor autograd keeps for backward while ``fn`` runs."""
    rows = [0]

    def pack(tensor):
        if tensor.shape and tensor.shape[-1] == vocab_size:
            rows.append(tensor.numel() // vocab_size)
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        fn()
    return max(rows)


def test_backward_keeps_no_full_vocabulary_logits(tiny):
    model, tokenizer = tiny("qwen2", "sdpa")
    batch = packed_collate(random_samples(len(tokenizer), seed=5, labelled=1.0))
    assert _largest_saved_vocab_tensor(lambda: labelled_logps(model, batch, chunk_size=4), len(tokenizer)) == 0
    full = _largest_saved_vocab_tensor(lambda: naive_labelled_logps(model, batch), len(tokenizer))
    assert full >= sum(LENGTHS) - 1  # the hook sees the [T, V] logits of the ordinary path


def test_fused_cross_entropy_refuses_where_it_cannot_run(tiny):
    model, tokenizer = tiny("qwen2", "sdpa")
    batch = batch_of("right", random_samples(len(tokenizer), seed=4), tokenizer.pad_token_id)
    with pytest.raises(RuntimeError, match="liger-kernel"):  # on CPU (or without liger) it is never possible
        supervised_nll_sum(model, batch, fused=True)
    with torch.no_grad():  # fused=None falls back to the chunked path
        torch.testing.assert_close(
            supervised_nll_sum(model, batch)[0], supervised_nll_sum(model, batch, fused=False)[0]
        )


@pytest.mark.gpu
@pytest.mark.skipif(fused_linear_cross_entropy() is None, reason="liger-kernel is not installed (the gpu extra)")
@pytest.mark.parametrize("layout", ["packed", "right"])
def test_fused_cross_entropy_equals_the_chunked_path(layout, tiny_model):
    """liger's fused linear cross-entropy: the same summed NLL and gradients as the chunked log-probs."""
    model, tokenizer = load(tiny_model(tiny={"tie_word_embeddings": False}))
    model = model.cuda()
    batch = batch_of(layout, random_samples(len(tokenizer), seed=5), tokenizer.pad_token_id)
    batch = {k: v.cuda() if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
    results = []
    for fused in (True, False):
        model.zero_grad()
        nll, n_tokens = supervised_nll_sum(model, batch, fused=fused)
        nll.backward()
        results.append((nll.detach(), n_tokens, {n: p.grad.clone() for n, p in model.named_parameters()}))
    (fused_nll, fused_n, fused_grads), (nll, n, grads) = results
    assert fused_n == n > 0
    torch.testing.assert_close(fused_nll, nll, atol=1e-4, rtol=1e-5)
    for name, grad in grads.items():
        torch.testing.assert_close(fused_grads[name], grad, atol=1e-5, rtol=1e-4, msg=name)
