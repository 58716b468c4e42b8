"""Reference policies: frozen copy, LoRA-disabled base, and log-probs precomputed to disk (also on 2 ranks)."""

from __future__ import annotations

import json
import os
import socket
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from rpbench.data.chat import ChatRenderer
from rpbench.data.datamodule import PlannedBatches, epoch_batcher
from rpbench.models import load
from rpbench.models.forward import sequence_logps
from rpbench.objectives.dpo import DPOModule
from rpbench.objectives.reference import (
    DisabledAdapter,
    FrozenCopy,
    PrecomputedReference,
    drop_reference_weights,
    live_reference,
    restore_reference_weights,
)


@pytest.fixture(scope="module")
def model_cfg(tiny_settings):
    """tiny-qwen2's settings."""
    return tiny_settings()


def pair_samples(pairs, tokenizer, n: int = 10) -> list[dict]:
    """The first ``n`` of ``pairs`` (the bundled sample's, ``sample_pairs``) rendered for DPO by ``tokenizer``."""
    samples, empty = DPOModule.render(pairs[:n], ChatRenderer(tokenizer, "<|im_end|>", 512))
    assert not empty
    return samples


def planned(samples, pad_id, batch_size=3, rank=0, world_size=1) -> PlannedBatches:
    data = PlannedBatches(
        samples,
        lambda s: DPOModule.collate(s, pad_id),
        epoch_batcher(len(samples), batch_size, 0),
        [1] * len(samples),
        grad_accum=1,
    )
    data.shard(rank, world_size)
    return data


def perturb(model, seed: int = 1) -> None:
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for param in model.parameters():
            param.add_(0.05 * torch.randn_like(param))


def test_frozen_copy_keeps_the_initial_weights_and_stays_out_of_training_and_checkpoints(model_cfg, sample_pairs):
    model, tokenizer = load(model_cfg)
    batch = DPOModule.collate(pair_samples(sample_pairs, tokenizer, 2), tokenizer.pad_token_id)
    reference = FrozenCopy(model)
    before = reference.sequence_logps(batch)
    perturb(model)
    assert not torch.allclose(sequence_logps(model, batch)[0], before)  # the policy moved
    assert torch.equal(reference.sequence_logps(batch), before)  # the reference did not
    assert not any(p.requires_grad for p in reference.parameters())
    reference.train()
    assert not reference.model.training

    holder = torch.nn.Module()
    holder.model, holder.reference = model, reference
    checkpoint = {"state_dict": holder.state_dict()}
    drop_reference_weights(checkpoint)
    assert checkpoint["state_dict"] and not any(k.startswith("reference.") for k in checkpoint["state_dict"])
    restore_reference_weights(holder, checkpoint)
    holder.load_state_dict(checkpoint["state_dict"], strict=True)
    assert torch.equal(reference.sequence_logps(batch), before)


def test_disabled_adapter_gives_the_base_model_while_the_adapter_trains(tiny_settings, model_cfg, sample_pairs):
    base, tokenizer = load(model_cfg)
    batch = DPOModule.collate(pair_samples(sample_pairs, tokenizer, 2), tokenizer.pad_token_id)
    base_logps = sequence_logps(base, batch)[0]
    policy, _ = load(tiny_settings(lora={"r": 4, "alpha": 8}))
    with torch.no_grad():
        for name, param in policy.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)
    reference = live_reference(policy)
    assert isinstance(reference, DisabledAdapter)
    assert not torch.allclose(sequence_logps(policy, batch)[0], base_logps, atol=1e-4)
    torch.testing.assert_close(reference.sequence_logps(batch), base_logps)
    assert isinstance(live_reference(base), FrozenCopy)


def test_disabled_adapter_runs_the_base_without_dropout_while_the_policy_trains(tiny_settings, sample_pairs):
    base, tokenizer = load(tiny_settings(tiny={"attention_dropout": 0.5}))
    batch = DPOModule.collate(pair_samples(sample_pairs, tokenizer, 2), tokenizer.pad_token_id)
    base.eval()
    base_logps = sequence_logps(base, batch)[0]  # no dropout
    policy, _ = load(tiny_settings(tiny={"attention_dropout": 0.5}, lora={"r": 4, "alpha": 8}))
    policy.train()
    with torch.no_grad():
        assert not torch.allclose(sequence_logps(policy, batch)[0], base_logps, atol=1e-4)  # dropout on
    torch.testing.assert_close(live_reference(policy).sequence_logps(batch), base_logps)
    assert policy.training  # given back in train mode


@pytest.mark.slow
def test_precomputed_reference_equals_the_live_one_and_is_reused_from_disk(tmp_path, model_cfg, sample_pairs):
    model, tokenizer = load(model_cfg)
    samples = pair_samples(sample_pairs, tokenizer)
    data = planned(samples, tokenizer.pad_token_id)
    live = FrozenCopy(model)
    path = tmp_path / "ref.json"
    built = PrecomputedReference.build(model, [data], path, torch.device("cpu"), "32-true")
    assert (built.computed, built.reused) == (len(samples), 0)
    assert set(json.loads(path.read_text())["entries"]) == {s["id"] for s in samples}
    for k in range(len(data)):
        batch = data[k]
        torch.testing.assert_close(built.sequence_logps(batch), live.sequence_logps(batch), rtol=1e-5, atol=1e-5)

    again = PrecomputedReference.build(model, [data], path, torch.device("cpu"), "32-true")
    assert (again.computed, again.reused) == (0, len(samples))
    assert torch.equal(again.sequence_logps(data[0]), built.sequence_logps(data[0]))

    other_precision = PrecomputedReference.build(model, [data], path, torch.device("cpu"), "bf16-mixed")
    assert other_precision.computed == len(samples)
    perturb(model)
    moved = PrecomputedReference.build(model, [data], path, torch.device("cpu"), "32-true")
    assert moved.computed == len(samples)
    assert not torch.allclose(moved.sequence_logps(data[0]), built.sequence_logps(data[0]))


def test_precomputed_reference_refuses_samples_it_was_not_computed_for(tmp_path, model_cfg, sample_pairs):
    model, tokenizer = load(model_cfg)
    samples = pair_samples(sample_pairs, tokenizer, 4)
    built = PrecomputedReference.build(
        model, [planned(samples, tokenizer.pad_token_id)], tmp_path / "r.json", torch.device("cpu"), "32-true"
    )
    changed = [{**samples[0], "fingerprint": "0" * 16}, {**samples[1], "id": "unknown-pair"}]
    with pytest.raises(KeyError, match="stale in the reference cache"):
        built.sequence_logps(DPOModule.collate(changed[:1], tokenizer.pad_token_id))
    with pytest.raises(KeyError, match="'unknown-pair' is missing from the reference cache"):
        built.sequence_logps(DPOModule.collate(changed[1:], tokenizer.pad_token_id))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _build_on_rank(rank: int, world_size: int, port: int, out_dir: str, model_cfg, pairs) -> None:
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.distributed.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        model, tokenizer = load(model_cfg)
        data = planned(pair_samples(pairs, tokenizer), tokenizer.pad_token_id, rank=rank, world_size=world_size)
        built = PrecomputedReference.build(model, [data], Path(out_dir) / "ref.json", torch.device("cpu"), "32-true")
        own = {i for k in range(len(data)) for i in data[k]["id"]}
        result = {
            "computed": built.computed,
            "entries": {k: list(v.logps) for k, v in built.entries.items()},
            "own": sorted(own),
        }
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps(result))
    finally:
        torch.distributed.destroy_process_group()


@pytest.mark.slow
def test_precompute_on_two_ranks_splits_the_work_and_gives_every_rank_the_whole_cache(
    tmp_path, model_cfg, sample_pairs
):
    picklable = replace(model_cfg, tiny=dict(model_cfg.tiny))  # the settings hold their sizes in a mappingproxy
    args = (2, _free_port(), str(tmp_path), picklable, sample_pairs)
    mp.spawn(_build_on_rank, args=args, nprocs=2, join=True)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    model, tokenizer = load(model_cfg)
    samples = pair_samples(sample_pairs, tokenizer)
    single = PrecomputedReference.build(
        model, [planned(samples, tokenizer.pad_token_id)], tmp_path / "single.json", torch.device("cpu"), "32-true"
    )
    assert set(ranks[0]["own"]).isdisjoint(ranks[1]["own"])  # each rank computed its own share
    assert set(ranks[0]["own"]) | set(ranks[1]["own"]) == {s["id"] for s in samples}
    for result in ranks:
        assert result["computed"] == len(samples)
        assert result["entries"].keys() == single.entries.keys()
        for sid, values in result["entries"].items():
            assert values == pytest.approx(list(single.entries[sid].logps), rel=1e-5, abs=1e-5)
    written = json.loads((tmp_path / "ref.json").read_text())["entries"]
    assert set(written) == set(single.entries)


def test_a_folder_as_ref_cache_is_a_configuration_error_leaving_nothing_behind(tmp_path):
    import torch

    from rpbench.core.errors import ConfigError
    from rpbench.objectives.reference import PrecomputedReference, _write_cache

    folder = tmp_path / "cache"
    folder.mkdir()
    with pytest.raises(ConfigError, match=r"objective.ref_cache=.*cache: the cache is one file, got a folder"):
        PrecomputedReference.build(torch.nn.Linear(1, 1), [], folder, torch.device("cpu"), "32-true")
    with pytest.raises(OSError):  # a write that cannot replace its target removes its temporary file
        _write_cache(folder, "signature", {})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache"]
