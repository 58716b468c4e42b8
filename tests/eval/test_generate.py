"""Batched generation on a real tiny model; resumable predictions files; the OpenAI-compatible backend."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import replace

import pytest
import torch

from rpbench.core.errors import DataFormatError
from rpbench.data.records import EvalExample, Turn, as_messages
from rpbench.eval.generate import generate_predictions, generate_via_endpoint, shard_path
from rpbench.eval.provenance import fingerprint_path

MAX_NEW = 10


@pytest.fixture(scope="module")
def model_cfg(tiny_settings):
    """tiny-qwen2 with initializer_range 0.2: random weights whose greedy continuations vary from token to token."""
    return tiny_settings(tiny={"initializer_range": 0.2})


@pytest.fixture(scope="module")
def tiny(model_cfg):
    from rpbench.models import load

    return load(model_cfg)


def make_examples(n: int = 7) -> list[EvalExample]:
    examples = []
    for i in range(n):
        turns = [Turn("user", "Hello there " * (1 + 3 * (i % 4)) + f"what is your name, traveller {i}?")]
        if i % 2:
            turns.insert(0, Turn("system", f"You are Captain {i}, a pirate."))
        examples.append(
            EvalExample(
                id=f"ex{i}",
                prompt=tuple(turns),
                reference=f"I am Captain {i}.",
                task=["role_style", "knowledge"][i % 2],
                meta={"dimension": [f"d{i % 3}"]},
            )
        )
    return examples


def read_jsonl(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def greedy_reference(model, tok, conversation, stop_ids) -> str:
    """model.generate on one unpadded prompt, cut at the first stop id."""
    ids = tok.apply_chat_template(
        conversation, add_generation_prompt=True, tokenize=True, return_dict=True, return_tensors="pt"
    )
    out = model.generate(**ids, max_new_tokens=MAX_NEW, do_sample=False)[0, ids["input_ids"].shape[1] :].tolist()
    cut = next((i for i, t in enumerate(out) if t in stop_ids), len(out))
    return tok.decode(out[:cut], skip_special_tokens=True).strip()


def test_greedy_equals_model_generate(tiny, generate_texts):
    model, tok = tiny
    conversation = as_messages(make_examples()[3].prompt)
    [text] = generate_texts(model, tok, [conversation], max_new_tokens=MAX_NEW)
    assert text == greedy_reference(model, tok, conversation, model.generation_config.eos_token_id)
    assert len(text) > 5


def test_left_padded_batches_equal_unbatched(tiny, generate_texts):
    model, tok = tiny
    conversations = [as_messages(ex.prompt) for ex in make_examples()]
    lengths = {len(tok.apply_chat_template(c, add_generation_prompt=True, tokenize=False)) for c in conversations}
    assert len(lengths) > 3  # prompts of different lengths are padded within one batch
    batched = generate_texts(model, tok, conversations, max_new_tokens=MAX_NEW, batch_size=len(conversations))
    single = generate_texts(model, tok, conversations, max_new_tokens=MAX_NEW, batch_size=1)
    assert batched == single
    assert len(set(batched)) == len(batched)


def test_stops_at_given_stop_id(tiny, generate_texts):
    model, tok = tiny
    conversation = as_messages(make_examples()[0].prompt)
    ids = tok.apply_chat_template(
        conversation, add_generation_prompt=True, tokenize=True, return_dict=True, return_tensors="pt"
    )
    free = model.generate(**ids, max_new_tokens=MAX_NEW, do_sample=False)[0, ids["input_ids"].shape[1] :].tolist()
    stop = free[4]
    first = free.index(stop)
    [text] = generate_texts(model, tok, [conversation], max_new_tokens=MAX_NEW, stop_ids=[stop])
    assert text == tok.decode(free[:first], skip_special_tokens=True).strip()


def test_sampling_is_seeded(tiny, generate_texts):
    model, tok = tiny
    conversations = [as_messages(ex.prompt) for ex in make_examples(3)]
    a = generate_texts(model, tok, conversations, max_new_tokens=MAX_NEW, temperature=1.0, seed=1)
    b = generate_texts(model, tok, conversations, max_new_tokens=MAX_NEW, temperature=1.0, seed=1)
    c = generate_texts(model, tok, conversations, max_new_tokens=MAX_NEW, temperature=1.0, seed=2)
    greedy = generate_texts(model, tok, conversations, max_new_tokens=MAX_NEW)
    assert a == b
    assert a != c and a != greedy


def test_options_are_parsed_with_named_errors(generation_options):
    with pytest.raises(ValueError, match=r"evaluator\.generation\.max_tokens: unknown key"):
        generation_options(max_tokens=5)
    with pytest.raises(ValueError, match=r"evaluator\.generation\.top_p=0\.0: expected a share in \(0, 1\]"):
        generation_options(top_p=0)


def test_predictions_file_resumes(tiny, tmp_path, generation_options, generate_texts):
    model, tok = tiny
    examples = make_examples()
    cfg = generation_options(max_new_tokens=MAX_NEW, batch_size=3)
    expected = generate_texts(model, tok, [as_messages(ex.prompt) for ex in examples], max_new_tokens=MAX_NEW)

    first = tmp_path / "first" / "predictions.jsonl"
    report = generate_predictions(model, tok, examples, first, cfg)
    records = read_jsonl(first)
    assert [r["id"] for r in records] == [ex.id for ex in examples]
    assert [r["prediction"] for r in records] == expected
    assert records[1]["reference"] == "I am Captain 1." and records[1]["task"] == "knowledge"
    assert records[1]["prompt"][0] == {"role": "system", "content": "You are Captain 1, a pirate."}
    assert records[1]["meta"] == {"dimension": ["d1"]}
    assert (report.n_generated, report.n_resumed) == (len(examples), 0)

    # A killed run of the same model and settings (its fingerprint): two complete lines (marked so a
    # regeneration would show) and a cut-off third.
    out = tmp_path / "second" / "predictions.jsonl"
    out.parent.mkdir()
    shutil.copy(fingerprint_path(first), fingerprint_path(out))
    kept = [dict(records[5], prediction="FROM THE EARLIER RUN"), dict(records[2], prediction="EARLIER TOO")]
    cut_off = json.dumps(records[0])[:25]
    out.write_text("".join(json.dumps(r) + "\n" for r in kept) + cut_off, encoding="utf-8")
    report = generate_predictions(model, tok, examples, out, cfg)
    assert (report.n_generated, report.n_resumed) == (len(examples) - 2, 2)
    assert "incomplete last line" in report.truncated_line
    resumed = read_jsonl(out)
    assert [r["id"] for r in resumed] == [ex.id for ex in examples]
    assert resumed[5]["prediction"] == "FROM THE EARLIER RUN" and resumed[2]["prediction"] == "EARLIER TOO"
    assert [r["prediction"] for i, r in enumerate(resumed) if i not in (2, 5)] == [
        t for i, t in enumerate(expected) if i not in (2, 5)
    ]

    again = generate_predictions(model, tok, examples, out, cfg)
    assert (again.n_generated, again.n_resumed, again.truncated_line) == (0, len(examples), None)
    assert read_jsonl(out) == resumed


def test_predictions_file_from_another_run_is_rejected(tiny, tmp_path, generation_options):
    model, tok = tiny
    examples = make_examples(3)
    out = tmp_path / "predictions.jsonl"
    generate_predictions(model, tok, examples[:1], out, generation_options(max_new_tokens=2))  # its fingerprint
    record = {"id": "ex1", "prompt": [{"role": "user", "content": "something else"}], "prediction": "x"}
    out.write_text(json.dumps(record) + "\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match="record ex1: field 'prompt'"):
        generate_predictions(model, tok, examples, out, generation_options(max_new_tokens=2))
    out.write_text(json.dumps({"id": "zz", "prompt": []}) + "\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match="record zz: field 'id': not in the evaluation set"):
        generate_predictions(model, tok, examples, out, generation_options(max_new_tokens=2))
    out.write_text('{"id": "ex0"\n{"id": "ex1"}\n', encoding="utf-8")
    with pytest.raises(DataFormatError, match="record line 1: field 'json'"):
        generate_predictions(model, tok, examples, out, generation_options(max_new_tokens=2))


def test_predictions_of_another_model_or_settings_are_set_aside_not_resumed(
    tiny, tmp_path, generation_options, generate_texts, model_cfg
):
    """Same folder, another model or other generation settings: the earlier predictions are moved aside whole
    and every record is generated afresh; other batching resumes."""
    from rpbench.models import load

    model, tok = tiny
    other, _ = load(replace(model_cfg, init_seed=1))  # another model of the same name and shape
    examples = make_examples(4)
    cfg = generation_options(max_new_tokens=MAX_NEW, batch_size=2)
    out = tmp_path / "predictions.jsonl"
    generate_predictions(model, tok, examples, out, cfg)
    first = read_jsonl(out)
    expected = generate_texts(other, tok, [as_messages(ex.prompt) for ex in examples], max_new_tokens=MAX_NEW)
    assert expected != [r["prediction"] for r in first]

    report = generate_predictions(other, tok, examples, out, cfg)
    assert (report.n_generated, report.n_resumed) == (4, 0)
    assert [r["prediction"] for r in read_jsonl(out)] == expected
    assert report.set_aside == {"file": "predictions.1.jsonl", "differs": ["model.weights_sha256"]}
    assert read_jsonl(tmp_path / "predictions.1.jsonl") == first

    longer = generation_options(max_new_tokens=MAX_NEW + 5, batch_size=2)
    report = generate_predictions(other, tok, examples, out, longer)
    assert (report.n_generated, report.n_resumed) == (4, 0)
    assert report.set_aside == {"file": "predictions.2.jsonl", "differs": ["generation.max_new_tokens"]}

    again = generate_predictions(other, tok, examples, out, generation_options(max_new_tokens=MAX_NEW + 5))
    assert (again.n_generated, again.n_resumed, again.set_aside) == (0, 4, None)  # batch size: not compared


def test_rank_zero_does_not_merge_a_shard_of_another_run(tiny, tmp_path, generation_options):
    """A shard left by a run of other settings (its rank not yet started again) is not taken as this run's."""
    model, tok = tiny
    examples = make_examples(4)
    out = tmp_path / "predictions.jsonl"
    generate_predictions(model, tok, examples, out, generation_options(max_new_tokens=3), rank=1, world_size=2)
    new = generation_options(max_new_tokens=4, merge_timeout_s=0.2)
    with pytest.raises(TimeoutError, match="2 of 4 predictions still missing"):
        generate_predictions(model, tok, examples, out, new, rank=0, world_size=2)
    generate_predictions(model, tok, examples, out, new, rank=1, world_size=2)  # moves its old shard aside
    assert (tmp_path / "predictions.rank1-of-2.1.jsonl").is_file()
    generate_predictions(model, tok, examples, out, new, rank=0, world_size=2)
    single = tmp_path / "single.jsonl"
    generate_predictions(model, tok, examples, single, new)
    assert read_jsonl(out) == read_jsonl(single)


def test_ranks_write_shards_and_rank_zero_merges(tiny, tmp_path, generation_options):
    model, tok = tiny
    examples = make_examples()  # 7 records: rank 0 takes 4, rank 1 takes 3
    cfg = generation_options(max_new_tokens=MAX_NEW, batch_size=2)
    single = tmp_path / "single" / "predictions.jsonl"
    generate_predictions(model, tok, examples, single, cfg)

    out = tmp_path / "ddp" / "predictions.jsonl"
    r1 = generate_predictions(model, tok, examples, out, cfg, rank=1, world_size=2)
    assert r1.n_generated == 3 and not out.exists()
    assert {r["id"] for r in read_jsonl(shard_path(out, 1, 2))} == {"ex1", "ex3", "ex5"}
    r0 = generate_predictions(model, tok, examples, out, cfg, rank=0, world_size=2)
    assert r0.n_generated == 4
    assert read_jsonl(out) == read_jsonl(single)
    assert not shard_path(out, 0, 2).exists() and not shard_path(out, 1, 2).exists()


def test_rank_zero_reports_a_missing_shard(tiny, tmp_path, generation_options):
    model, tok = tiny
    cfg = generation_options(max_new_tokens=2, merge_timeout_s=0.2)
    with pytest.raises(TimeoutError, match="3 of 7 predictions still missing"):
        generate_predictions(model, tok, make_examples(), tmp_path / "p.jsonl", cfg, rank=0, world_size=2)


def _synced_worker(rank: int, world_size: int, port: int, out: str, model_cfg, cfg) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
    torch.distributed.init_process_group("gloo", rank=rank, world_size=world_size)
    from rpbench.models import load

    model, tok = load(model_cfg)
    generate_predictions(model, tok, make_examples(5), out, cfg, rank=rank, world_size=world_size)
    torch.distributed.destroy_process_group()


@pytest.mark.slow
def test_synced_gpus_with_uneven_shards_does_not_hang(tiny, tmp_path, generation_options, model_cfg):
    """Under synced_gpus every rank makes the same number of generate calls, even with nothing to do."""
    import socket

    import torch.multiprocessing as mp

    model, tok = tiny
    out = tmp_path / "predictions.jsonl"
    examples = make_examples(5)
    # rank 1's share (ex1, ex3) is already done: it has 0 real batches, rank 0 has 3
    generate_predictions(model, tok, examples[1::2], shard_path(out, 1, 2), generation_options(max_new_tokens=6))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    synced = generation_options(max_new_tokens=6, batch_size=1, synced_gpus=True, merge_timeout_s=60)
    args = (2, port, str(out), model_cfg, synced)
    context = mp.start_processes(_synced_worker, args=args, nprocs=2, join=False, start_method="spawn")
    finished = False
    for _ in range(120):
        if context.join(timeout=1):
            finished = True
            break
    if not finished:
        for process in context.processes:
            process.kill()
    assert finished, "ranks hung"
    assert [r["id"] for r in read_jsonl(out)] == [ex.id for ex in examples]


# ------------------------------------------------------------------------------------ endpoint


def reversed_reply(body: dict) -> str | int:
    """The last user message reversed (padded with spaces); a message containing "FAIL" gets HTTP 500."""
    last = body["messages"][-1]["content"]
    return 500 if "FAIL" in last else " " + last[::-1] + " "


@pytest.fixture
def server(chat_stub):
    with chat_stub(reversed_reply) as srv:
        yield srv


def test_endpoint_backend_writes_and_resumes(server, tmp_path, generation_options, generation_endpoint):
    examples = make_examples()
    out = tmp_path / "predictions.jsonl"
    cfg = generation_options(max_new_tokens=33)
    endpoint = generation_endpoint(server.url, "served-model", concurrency=3)
    report = generate_via_endpoint(endpoint, examples, out, cfg)
    records = read_jsonl(out)
    assert [r["id"] for r in records] == [ex.id for ex in examples]
    assert [r["prediction"] for r in records] == [ex.prompt[-1].content[::-1] for ex in examples]
    assert report.n_generated == len(examples)
    request = server.requests[0]
    assert request["model"] == "served-model" and request["max_tokens"] == 33 and request["temperature"] == 0
    assert {tuple(m.items()) for m in request["messages"]} <= {
        tuple(m.items()) for ex in examples for m in as_messages(ex.prompt)
    }

    again = generate_via_endpoint(endpoint, examples, out, cfg)
    assert again.n_generated == 0 and len(server.requests) == len(examples)

    another = generate_via_endpoint(generation_endpoint(server.url, "another-model"), examples, out, cfg)
    assert (another.n_generated, another.n_resumed) == (len(examples), 0)
    assert another.set_aside == {"file": "predictions.1.jsonl", "differs": ["endpoint.model"]}
    assert server.requests[-1]["model"] == "another-model"


def test_endpoint_failures_are_reported_after_the_rest_is_written(
    server, tmp_path, generation_endpoint, generation_options
):
    examples = make_examples(4)
    examples[2] = EvalExample(id="bad", prompt=(Turn("user", "please FAIL"),), reference="r", task="t")
    out = tmp_path / "predictions.jsonl"
    with pytest.raises(RuntimeError, match=r"1 of 4 endpoint requests failed \(first: record 'bad'"):
        generate_via_endpoint(generation_endpoint(server.url, "m", max_retries=0), examples, out, generation_options())
    assert sorted(r["id"] for r in read_jsonl(out)) == ["ex0", "ex1", "ex3"]


def test_endpoint_requests_are_retried_and_counted_by_the_shared_client(
    tmp_path, chat_stub, generation_endpoint, generation_options
):
    """Each prompt's first request gets an HTTP 503; the client retries it once, and the report counts it."""
    asked: set[str] = set()

    def flaky(body: dict) -> str | int:
        last = body["messages"][-1]["content"]
        if last not in asked:
            asked.add(last)
            return 503
        return last.upper()

    examples, out = make_examples(3), tmp_path / "predictions.jsonl"
    with chat_stub(flaky) as stub:
        endpoint = generation_endpoint(stub.url, "m", max_retries=1, backoff_initial_s=0.01, backoff_max_s=0.05)
        report = generate_via_endpoint(endpoint, examples, out, generation_options())
    assert [r["prediction"] for r in read_jsonl(out)] == [e.prompt[-1].content.upper() for e in examples]
    usage = report.endpoint_usage
    assert (usage["requests"], usage["retries"], usage["replies"], usage["failures"]) == (6, 3, 3, 0)
    assert (usage["prompt_tokens"], usage["completion_tokens"], usage["cache_hits"]) == (3, 3, 0)


def test_over_long_prompts_are_counted_by_how_they_were_cut(tiny, tmp_path, generation_options):
    model, tok = tiny
    examples = make_examples()
    limit = 40
    texts = [
        tok.apply_chat_template(as_messages(ex.prompt), tokenize=False, add_generation_prompt=True) for ex in examples
    ]
    lengths = [len(tok(text, add_special_tokens=False)["input_ids"]) for text in texts]
    over = [ex.prompt[0].role == "system" for ex, n in zip(examples, lengths) if n > limit]
    assert over.count(True) >= 1 and over.count(False) >= 1  # the fixture has both kinds
    cfg = generation_options(max_new_tokens=2, batch_size=4, max_prompt_length=limit)
    report = generate_predictions(model, tok, examples, tmp_path / "predictions.jsonl", cfg)
    # one-turn prompts: nothing to drop; a system turn is kept whole, a prompt without one loses its start
    assert report.prompts_fitted == {
        "history_dropped": 0,
        "cut_after_system": over.count(True),
        "cut_left": over.count(False),
    }


@pytest.mark.slow
def test_repetition_penalty_reaches_local_generation(tiny, generate_texts):
    """A penalty changes the greedy reply, to what model.generate gives with the same penalty."""
    model, tok = tiny
    conversation = as_messages(make_examples()[0].prompt)
    stop_ids = model.generation_config.eos_token_id
    [plain] = generate_texts(model, tok, [conversation], max_new_tokens=60)
    [penalised] = generate_texts(model, tok, [conversation], max_new_tokens=60, repetition_penalty=100.0)
    ids = tok.apply_chat_template(
        conversation, add_generation_prompt=True, tokenize=True, return_dict=True, return_tensors="pt"
    )
    out = model.generate(**ids, max_new_tokens=60, do_sample=False, repetition_penalty=100.0)
    row = out[0, ids["input_ids"].shape[1] :].tolist()
    stops = stop_ids if isinstance(stop_ids, list) else [stop_ids]
    cut = next((i for i, t in enumerate(row) if t in stops), len(row))
    assert penalised != plain
    assert penalised == tok.decode(row[:cut], skip_special_tokens=True).strip()


def test_repetition_penalty_is_sent_to_the_endpoint(server, tmp_path, generation_options, generation_endpoint):
    cfg = generation_options(repetition_penalty=1.05)
    generate_via_endpoint(generation_endpoint(server.url, "m"), make_examples(2), tmp_path / "p.jsonl", cfg)
    assert {r["repetition_penalty"] for r in server.requests} == {1.05}
