"""ZeRO-3 on two CPU processes (DeepSpeed's CPU accelerator over gloo), with a real engine and its hooks: the
export gathers one module at a time and equals the unsharded model (LoRA merged as peft merges it), and
generation gathers the model once per batch, so ranks generating different lengths and numbers of tokens
finish, with the unsharded model's tokens.

One pair of processes runs every check (``zero3_results``); the tests read what it measured."""

from __future__ import annotations

import copy
import os
import socket
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from rpbench.models.settings import LoraSettings

LORA = LoraSettings(r=4, alpha=8, dropout=0.0, target_modules=("q_proj", "v_proj"))
PROMPTS = [[5, 17, 33, 2, 9], [40, 41], [7, 7, 8, 100, 3, 12, 90], [250, 6, 1]]
NEW_TOKENS = {0: 3, 1: 9}  # uneven per rank: a per-token collective would leave rank 1 waiting for rank 0
ROWS = {0: PROMPTS[:1], 1: PROMPTS[1:]}  # uneven per rank: 1 and 3 batches of 1, evened out to 3
ZERO3 = {
    "train_micro_batch_size_per_gpu": 1,
    "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0},  # nothing stays gathered
    "zero_allow_untested_optimizer": True,
}


def _engine(model):
    import deepspeed

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return deepspeed.initialize(model=model, optimizer=optimizer, config=ZERO3)[0]


def _available(model) -> int:
    from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus

    return sum(p.ds_numel for p in set(model.parameters()) if p.ds_status == ZeroParamStatus.AVAILABLE)


def _export_checks(model, reference, rank: int, lora_layers=(), **kwargs) -> dict:
    """The gathered state dict and what was gathered while each module was: beyond the module's own
    parameters (a LoRA layer: with its base layer and adapters; must be 0), the most at once, and the
    largest module."""
    from rpbench.models.zero3 import gathered_state_dict

    seen = {"extra": 0, "peak": 0, "largest": 0, "before": _available(model)}

    def probe(name, module):
        own = sum(p.ds_numel for p in set(module.parameters(recurse=name in lora_layers)))
        now = _available(model)
        seen["extra"], seen["peak"] = max(seen["extra"], now - own), max(seen["peak"], now)
        seen["largest"] = max(seen["largest"], own)

    state = gathered_state_dict(model, rank == 0, on_gathered=probe, **kwargs)
    seen["after"] = _available(model)
    seen["total"] = sum(p.ds_numel for p in set(model.parameters()))
    if rank == 0:
        expected = reference.state_dict()
        seen["same_keys"] = sorted(state) == sorted(expected)
        seen["different"] = [k for k in expected if k in state and not torch.equal(state[k], expected[k])]
        seen["tied"] = [k for k in state if any(state[k] is state[j] for j in state if j != k)]
        seen["expected_tied"] = [
            k for k in expected if any(expected[k].data_ptr() == expected[j].data_ptr() for j in expected if j != k)
        ]
    else:
        seen["empty"] = state == {}
    return seen


def _generation_checks(engine, reference, tokenizer, rank: int, opts) -> dict:
    from rpbench.models.generation import generate_batches, synced_gpus_needed
    from rpbench.objectives.sampling import generate_rows

    model = engine.module
    stop = [tokenizer.eos_token_id]
    gathered_per_token = []
    hook = model.lm_head.register_forward_pre_hook(lambda *_: gathered_per_token.append(_available(model)))
    found = list(generate_batches(model, tokenizer, ROWS[rank], opts, stop, min_batches=3))
    rows = generate_rows(model, ROWS[rank], opts, stop, tokenizer.pad_token_id, seed=0)
    hook.remove()
    expected = list(generate_batches(reference, tokenizer, ROWS[rank], opts, stop))
    # the fallback for a model too large for one device: partitioned, the ranks in step every token
    per_token = replace(opts, gather_per_batch=False)
    synced = {"default": synced_gpus_needed(model, opts, 2), "fallback": synced_gpus_needed(model, per_token, 2)}
    gathered_per_token_fallback = []
    hook = model.lm_head.register_forward_pre_hook(lambda *_: gathered_per_token_fallback.append(_available(model)))
    fallback = list(generate_batches(model, tokenizer, ROWS[rank], per_token, stop, min_batches=3, synced_gpus=True))
    hook.remove()
    expected_rows = generate_rows(reference, ROWS[rank], opts, stop, tokenizer.pad_token_id, seed=0)
    total = sum(p.ds_numel for p in set(model.parameters()))
    # the engine still trains afterwards (its hooks gather and release as before)
    ids = torch.tensor([PROMPTS[2]])
    loss = engine(input_ids=ids, labels=ids).loss
    engine.backward(loss)
    engine.step()
    return {
        "batches": found,
        "expected_batches": expected,
        "rows": rows.completion_ids,
        "expected_rows": expected_rows.completion_ids,
        "forwards": len(gathered_per_token),
        "whole_model_each_forward": all(n == total for n in gathered_per_token),
        "released_after": _available(model),
        "synced": synced,
        "fallback": fallback,
        "fallback_most_gathered": max(gathered_per_token_fallback),
        "total": total,
    }


def _worker(rank: int, port: int, out: Path, model_settings, generation) -> None:
    """Rank ``rank``'s checks of the tiny model ``model_settings``, generating with its ``generation`` options."""
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2"
    )
    os.environ["DS_ACCELERATOR"] = "cpu"
    torch.set_num_threads(1)
    import deepspeed

    from rpbench.models.loading import load, save_hf_partitioned

    deepspeed.init_distributed(dist_backend="gloo")
    results = {}
    model, tokenizer = load(model_settings)
    reference = copy.deepcopy(model)
    engine = _engine(model)
    results["export"] = _export_checks(engine.module, reference, rank)
    results["generation"] = _generation_checks(engine, reference, tokenizer, rank, generation)

    peft, _ = load(replace(model_settings, lora=LORA))
    with torch.no_grad():
        for name, param in peft.named_parameters():
            if "lora_B" in name:
                param.normal_(std=0.5, generator=torch.Generator().manual_seed(len(name)))
    plain = copy.deepcopy(peft)
    merged = copy.deepcopy(peft).merge_and_unload()
    lora_engine = _engine(peft)
    layers = [n for n, m in lora_engine.module.named_modules() if hasattr(m, "get_delta_weight")]
    results["lora"] = _export_checks(lora_engine.module, merged, rank, lora_layers=layers)
    save_hf_partitioned(lora_engine.module, tokenizer, out / "zero3", rank == 0, lora_adapter=True)
    if rank == 0:
        from rpbench.models.loading import save_hf

        save_hf(plain, tokenizer, out / "plain", lora_adapter=True)
    torch.save(results, out / f"rank{rank}.pt")
    deepspeed.comm.barrier()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def zero3_results(tmp_path_factory, tiny_settings, generation_options):
    out = tmp_path_factory.mktemp("zero3")
    port = _free_port()
    model_settings = tiny_settings(
        end_of_turn="<|im_end|>",
        init_seed=0,
        tiny={"hidden_size": 32, "intermediate_size": 64, "vocab_size": 512},
    )
    generation = {rank: generation_options(max_new_tokens=NEW_TOKENS[rank], batch_size=1) for rank in range(2)}
    context = mp.get_context("spawn")
    workers = [
        context.Process(target=_worker, args=(rank, port, out, model_settings, generation[rank])) for rank in range(2)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=300)
    hung = [rank for rank, worker in enumerate(workers) if worker.is_alive()]
    for worker in workers:
        if worker.is_alive():
            worker.kill()
    assert not hung, f"ranks {hung} did not finish (a collective left waiting)"
    assert [w.exitcode for w in workers] == [0, 0]
    return out, [torch.load(out / f"rank{rank}.pt", weights_only=False) for rank in range(2)]


@pytest.mark.slow
def test_gathered_state_dict_equals_the_unsharded_one_one_module_at_a_time(zero3_results):
    _, ranks = zero3_results
    zero, one = ranks[0]["export"], ranks[1]["export"]
    assert zero["same_keys"] and zero["different"] == []
    assert zero["tied"] == zero["expected_tied"]  # tied embeddings stay one tensor, as save_pretrained expects
    assert one["empty"]  # the other rank keeps nothing
    for seen in (zero, one):
        assert seen["before"] == seen["after"] == 0  # partitioned before and after
        assert seen["extra"] == 0  # nothing gathered beyond the module being copied
        assert seen["peak"] == seen["largest"] < seen["total"] / 2  # the embedding


@pytest.mark.slow
def test_lora_is_merged_per_layer_as_peft_merges_it(zero3_results):
    _, ranks = zero3_results
    zero = ranks[0]["lora"]
    assert zero["same_keys"] and zero["different"] == []
    for seen in (zero, ranks[1]["lora"]):
        assert seen["extra"] == 0 and seen["before"] == seen["after"] == 0
    assert ranks[1]["lora"]["empty"]


@pytest.mark.slow
def test_lora_export_writes_what_the_unsharded_export_writes(zero3_results):
    from safetensors.torch import load_file

    out, _ = zero3_results
    for part in ("model.safetensors", "adapter/adapter_model.safetensors"):
        zero, plain = load_file(out / "zero3" / part), load_file(out / "plain" / part)
        assert zero.keys() == plain.keys(), part
        assert all(torch.equal(zero[k], plain[k]) for k in plain), part
    assert not any("lora" in key for key in load_file(out / "zero3" / "model.safetensors"))


@pytest.mark.slow
def test_generation_gathers_once_per_batch_and_matches_the_unsharded_model(zero3_results):
    _, ranks = zero3_results
    for rank, results in enumerate(ranks):
        seen = results["generation"]
        assert seen["batches"] == seen["expected_batches"]
        assert [len(batch) for batch, _ in seen["batches"]] == [1] * len(ROWS[rank])
        assert seen["rows"] == seen["expected_rows"]
        assert max(len(row) for row in seen["rows"]) > 1
        assert seen["forwards"] >= 3 * 2  # several tokens per generate call, the whole model gathered in each
        assert seen["whole_model_each_forward"]
        assert seen["released_after"] == 0
    assert ranks[0]["generation"]["forwards"] < ranks[1]["generation"]["forwards"]


@pytest.mark.slow
def test_gather_per_batch_false_generates_partitioned_with_the_ranks_in_step_every_token(zero3_results):
    _, ranks = zero3_results
    for results in ranks:
        seen = results["generation"]
        assert seen["synced"] == {"default": False, "fallback": True}  # detected from the parameters
        assert seen["fallback"] == seen["expected_batches"]
        assert seen["fallback_most_gathered"] < seen["total"] / 2  # module by module, never the whole model
