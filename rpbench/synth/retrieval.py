"""Step 3: the most and least relevant MRC triplets (passages, question, answers) of each profile.

The pool is JSON lines in MS MARCO's layout: ``query``, ``answers`` (a list; MS MARCO's "No Answer Present."
or none = unanswerable) and ``passages`` (``{"passage_text": [...], ...}`` as the Hugging Face v2.1 release,
or a list of ``{"passage_text": ...}``). It is streamed: records are embedded in batches (question and
passages, by a sentence-transformers model, unit vectors) into a faiss inner-product index, written beside
the pool as ``<pool>.index/`` with each record's byte offset, and reused while the pool file and the encoder
are unchanged. A profile's most relevant records are the top of ``index.search(q)``, its least relevant the
top of ``index.search(-q)``. GPU faiss searches on the GPU when it is installed and a GPU is present.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rpbench.core.atomic import partial_path, publish
from rpbench.core.errors import ConfigError, DataFormatError
from rpbench.core.progress_bar import progress_bar

NO_ANSWER = "No Answer Present."
PACKAGED_ENCODER = "sentence-transformers/all-MiniLM-L6-v2"
INDEX_FORMAT = 1
# Pool records read, embedded and added to the index at a time (the pool itself is never held in memory).
CHUNK_RECORDS = 4096


@dataclass(frozen=True)
class Encoder:
    model: Any
    name: str

    def embed(self, texts: Sequence[str], batch_size: int) -> np.ndarray:
        vectors = self.model.encode(
            list(texts),
            batch_size=batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.ascontiguousarray(vectors, dtype=np.float32)


@functools.cache
def load_encoder(encoder: str | None) -> Encoder:
    """A sentence-transformers model: ``encoder`` (a local folder or a cached hub name; never downloaded), or
    the packaged all-MiniLM-L6-v2 when None. Loaded once per process."""
    import torch
    from sentence_transformers import SentenceTransformer

    from rpbench.scoring.metrics import fallback_model_path

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if encoder is None:
        return Encoder(SentenceTransformer(fallback_model_path(), device=device), PACKAGED_ENCODER)
    try:
        model = SentenceTransformer(encoder, device=device, local_files_only=True)
    except OSError as error:
        raise ConfigError(f"synth.encoder={encoder!r} is not available locally ({error})") from error
    return Encoder(model, Path(encoder).name if Path(encoder).exists() else encoder)


def read_triplet(raw: str, path: Path, number: int) -> dict[str, Any]:
    """A pool line as ``{"query", "answers", "passages", "answerable"}``; errors name file, line and field."""
    where = f"line {number}"
    try:
        record = json.loads(raw)
    except json.JSONDecodeError as error:
        raise DataFormatError(path, where, "<record>", f"not JSON ({error.msg})") from None
    if not isinstance(record, dict):
        raise DataFormatError(path, where, "<record>", "expected a JSON object")
    query = record.get("query")
    if not isinstance(query, str) or not query.strip():
        raise DataFormatError(path, where, "query", "a non-empty string")
    passages = record.get("passages")
    if isinstance(passages, dict):
        texts = passages.get("passage_text")
    elif isinstance(passages, list):
        texts = [p.get("passage_text") if isinstance(p, dict) else None for p in passages]
    else:
        texts = None
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) and t.strip() for t in texts):
        raise DataFormatError(path, where, "passages", "non-empty passage_text strings")
    answers = record.get("answers") or []
    if not isinstance(answers, list) or not all(isinstance(a, str) for a in answers):
        raise DataFormatError(path, where, "answers", "a list of strings")
    answers = [a.strip() for a in answers if a.strip() and a.strip() != NO_ANSWER]
    return {
        "query": query.strip(),
        "answers": answers,
        "passages": [t.strip() for t in texts],
        "answerable": bool(answers),
    }


def embedding_text(triplet: dict[str, Any]) -> str:
    return triplet["query"] + "\n" + " ".join(triplet["passages"])


def _pool_lines(path: Path) -> Iterator[tuple[int, int, str]]:
    """(line number, byte offset, text) of each non-blank line."""
    offset = 0
    with path.open("rb") as lines:
        for number, line in enumerate(lines, 1):
            if line.strip():
                yield number, offset, line.decode("utf-8")
            offset += len(line)


class PoolIndex:
    """The pool's faiss index and offsets; ``triplet(i)`` reads record i back from the pool file."""

    def __init__(self, pool: Path, index: Any, offsets: np.ndarray, meta: dict[str, Any], on_gpu: bool):
        self.pool, self.index, self.offsets, self.meta, self.on_gpu = pool, index, offsets, meta, on_gpu

    def __len__(self) -> int:
        return len(self.offsets)

    def triplets(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        """Records ``indices`` of the pool, read back from the file at their offsets."""
        out = []
        with self.pool.open("rb") as f:
            for i in indices:
                f.seek(int(self.offsets[i]))
                out.append({"pool_index": int(i), **read_triplet(f.readline().decode("utf-8"), self.pool, -1)})
        return out

    def search(
        self, queries: np.ndarray, k: int
    ) -> tuple[list[list[tuple[int, float]]], list[list[tuple[int, float]]]]:
        """Per query row: the ``k`` most and the ``k`` least relevant (index, inner product), best first."""
        k = min(k, len(self))
        most_s, most_i = self.index.search(queries, k)
        least_s, least_i = self.index.search(-queries, k)
        most = [[(int(i), float(s)) for i, s in zip(ids, scores)] for ids, scores in zip(most_i, most_s)]
        least = [[(int(i), -float(s)) for i, s in zip(ids, scores)] for ids, scores in zip(least_i, least_s)]
        return most, least


def index_dir(pool: Path) -> Path:
    return pool.with_name(pool.name + ".index")


def _pool_identity(pool: Path, encoder: str) -> dict[str, Any]:
    stat = pool.stat()
    return {"format": INDEX_FORMAT, "encoder": encoder, "pool_bytes": stat.st_size, "pool_mtime_ns": stat.st_mtime_ns}


def open_pool_index(
    pool: str | Path,
    encoder: Encoder,
    batch_size: int,
    chunk_records: int = CHUNK_RECORDS,
    folder: str | Path | None = None,
) -> tuple[PoolIndex, bool]:
    """The pool's index, built (and saved in ``folder``, default beside the pool: ``index_dir``) unless a matching
    one is there; (index, built)."""
    import faiss

    pool = Path(pool)
    if not pool.is_file():
        raise ConfigError(f"synth.pool_file: {pool} is not a file")
    folder, identity = Path(folder) if folder else index_dir(pool), _pool_identity(pool, encoder.name)
    meta_file = folder / "meta.json"
    built = False
    if not (
        meta_file.is_file() and {k: v for k, v in json.loads(meta_file.read_text()).items() if k != "count"} == identity
    ):
        _build(pool, encoder, batch_size, chunk_records, folder, identity)
        built = True
    meta = json.loads(meta_file.read_text())
    index = faiss.read_index(str(folder / "index.faiss"))
    on_gpu = hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0
    if on_gpu:
        index = faiss.index_cpu_to_all_gpus(index)
    return PoolIndex(pool, index, np.load(folder / "offsets.npy"), meta, on_gpu), built


def _build(
    pool: Path, encoder: Encoder, batch_size: int, chunk_records: int, folder: Path, identity: dict[str, Any]
) -> None:
    import faiss

    index, offsets, texts, chunk_offsets = None, [], [], []
    work = partial_path(folder)
    work.mkdir(parents=True, exist_ok=True)

    def flush() -> None:
        nonlocal index
        vectors = encoder.embed(texts, batch_size)
        if index is None:
            index = faiss.IndexFlatIP(vectors.shape[1])
        index.add(vectors)
        offsets.extend(chunk_offsets)
        texts.clear()
        chunk_offsets.clear()

    with progress_bar(desc="embed pool", unit="record") as bar:
        for number, offset, line in _pool_lines(pool):
            texts.append(embedding_text(read_triplet(line, pool, number)))
            chunk_offsets.append(offset)
            if len(texts) == chunk_records:
                flush()
                bar.update(chunk_records)
        if texts:
            bar.update(len(texts))
            flush()
    if index is None:
        raise ConfigError(f"synth.pool_file: {pool} holds no record")
    faiss.write_index(index, str(work / "index.faiss"))
    np.save(work / "offsets.npy", np.asarray(offsets, dtype=np.int64))
    (work / "meta.json").write_text(json.dumps({**identity, "count": len(offsets)}, indent=2))
    publish(work, folder)


def retrieve(
    index: PoolIndex,
    encoder: Encoder,
    profiles: Sequence[dict[str, Any]],
    texts: Sequence[str],
    k: int,
    batch_size: int,
) -> list[dict[str, Any]]:
    """A retrieval record per profile: its ``most`` and ``least`` relevant triplets, each with its score."""
    most, least = index.search(encoder.embed(texts, batch_size), k)
    records = []
    for profile, *ends in zip(profiles, most, least):
        record = {"id": profile["id"]}
        for end, ranked in zip(("most", "least"), ends):
            triplets = index.triplets([i for i, _ in ranked])
            record[end] = [{**t, "score": round(score, 6)} for t, (_, score) in zip(triplets, ranked)]
        records.append(record)
    return records
