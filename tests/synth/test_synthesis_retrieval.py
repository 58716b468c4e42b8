"""Retrieval on a constructed MS MARCO-layout pool with a real faiss index and the packaged MiniLM encoder: each
profile's most relevant records are its own topic's, its least relevant are what brute-force inner products
(numpy, the peer) put last; the index is saved beside the pool and rebuilt when the pool changes."""

from __future__ import annotations

import json

import numpy as np
import pytest
from synth_fixtures import TOPICS, write_pool

from rpbench.core.errors import DataFormatError
from rpbench.synth.retrieval import index_dir, load_encoder, open_pool_index, retrieve


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    return write_pool(tmp_path_factory.mktemp("pool") / "pool.jsonl")


def test_most_and_least_relevant_triplets_on_a_known_pool(pool):
    path, where = pool
    encoder = load_encoder(None)
    index, built = open_pool_index(path, encoder, batch_size=16, chunk_records=16)  # 20 records: chunks of 16 and 4
    assert built and len(index) == 20 and (index_dir(path) / "index.faiss").is_file()
    profiles = [{"id": topic} for topic in TOPICS]
    texts = [persona for persona, _ in TOPICS.values()]
    records = retrieve(index, encoder, profiles, texts, k=3, batch_size=8)

    pool_vectors = index.index.reconstruct_n(0, len(index))
    assert np.linalg.norm(pool_vectors, axis=1) == pytest.approx(np.ones(20), abs=1e-5)  # unit vectors
    scores = encoder.embed(texts, 8) @ pool_vectors.T  # the peer: every inner product, by numpy
    for row, record in enumerate(records):
        topic = record["id"]
        assert all(t["pool_index"] in where[topic] for t in record["most"]), (topic, record["most"])
        assert [t["pool_index"] for t in record["least"]] == list(np.argsort(scores[row], kind="stable")[:3])
        assert [t["score"] for t in record["least"]] == pytest.approx(np.sort(scores[row])[:3], abs=1e-5)
        assert not set(where[topic]) & {t["pool_index"] for t in record["least"]}
    unanswerable = [t for r in records for t in r["most"] if not t["answerable"]]
    assert unanswerable and all(t["answers"] == [] for t in unanswerable)  # "No Answer Present." is no answer

    assert open_pool_index(path, encoder, batch_size=16)[1] is False  # reused


def test_the_index_is_rebuilt_when_the_pool_changes_and_bad_records_are_named(tmp_path):
    path, encoder = tmp_path / "pool.jsonl", load_encoder(None)
    record = {"query": "q", "answers": ["a"], "passages": [{"passage_text": "p", "is_selected": 1}]}
    path.write_text(json.dumps(record) + "\n")
    assert open_pool_index(path, encoder, batch_size=4)[1] is True
    with path.open("a") as f:
        f.write("\n" + json.dumps({**record, "query": "another"}) + "\n")  # a blank line is no record
    rebuilt, built = open_pool_index(path, encoder, batch_size=4)
    assert built and len(rebuilt) == 2 and rebuilt.triplets([1])[0]["query"] == "another"
    with path.open("a") as f:
        f.write(json.dumps({**record, "passages": {"passage_text": []}}) + "\n")
    with pytest.raises(DataFormatError, match=r"pool.jsonl: record line 4: field 'passages'"):
        open_pool_index(path, encoder, batch_size=4)
