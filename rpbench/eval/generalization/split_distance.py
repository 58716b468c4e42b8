"""How far apart splits of one's own data are, before any training: R-EMID's representation JSD (``rjsd``)
between every two splits, over each input part, overall and per subset (the records' ``task`` label).

Parts of a record: RPGBench test records (``meta["x"]``) give R-EMID's own three fields (``severity.input_field_texts``:
user persona, agent character, dialogue context). Any other record: ``user``, its user turns; ``character``,
its system prompt (a record without one is left out of that part, and counted); ``dialogue``, the whole
conversation (every turn and the reply) as ``role: text`` lines.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import combinations
from typing import Any

import torch

from rpbench.data.records import EvalExample
from rpbench.eval.generalization.embed import TextEmbedder
from rpbench.eval.generalization.rjsd import Weighting, representation_jsd
from rpbench.eval.generalization.severity import INPUT_FIELDS, input_field_texts

OVERALL = "(all)"


def part_texts(examples: Sequence[EvalExample]) -> dict[str, list[str | None]]:
    """Part -> one text per record (None: the record has no such part)."""
    if examples and all("x" in e.meta for e in examples):
        return dict(input_field_texts(examples))
    system = [" ".join(t.content for t in e.prompt if t.role == "system") or None for e in examples]
    users = ["\n".join(t.content for t in e.prompt if t.role == "user") or None for e in examples]
    dialogue = [
        "\n".join([*(f"{t.role}: {t.content}" for t in e.prompt), f"assistant: {e.reference}"]) for e in examples
    ]
    return {"user": users, "character": system, "dialogue": dialogue}


def embedded_parts(
    embedder: TextEmbedder, examples: Sequence[EvalExample]
) -> dict[str, tuple[list[int], torch.Tensor]]:
    """Part -> (the records that have it, their embeddings in that order)."""
    out = {}
    for part, texts in part_texts(examples).items():
        rows = [i for i, text in enumerate(texts) if text and text.strip()]
        if rows:
            out[part] = (rows, embedder.embed([texts[i] for i in rows], name=part).vectors)
    return out


def _jsd(
    a: tuple[list[int], torch.Tensor] | None, b: tuple[list[int], torch.Tensor] | None, keep_a, keep_b, weighting
) -> dict[str, Any]:
    """RJSD of the chosen records' embeddings of one part (None when either side has none)."""
    if a is None or b is None:
        return {"jsd": None, "n": [0, 0]}
    rows_a = [k for k, i in enumerate(a[0]) if i in keep_a]
    rows_b = [k for k, i in enumerate(b[0]) if i in keep_b]
    if not rows_a or not rows_b:
        return {"jsd": None, "n": [len(rows_a), len(rows_b)]}
    value = representation_jsd(a[1][rows_a], b[1][rows_b], weighting)
    return {"jsd": value, "n": [len(rows_a), len(rows_b)]}


def split_shift(
    splits: Mapping[str, Sequence[EvalExample]], embedder: TextEmbedder, weighting: Weighting
) -> dict[str, Any]:
    """For every two splits ("a vs b"): per subset (and ``(all)``) each part's JSD and record counts."""
    if len(splits) < 2:
        raise ValueError(f"a shift report needs two or more splits, got {list(splits)}")
    parts = {name: embedded_parts(embedder, examples) for name, examples in splits.items()}
    missing = {
        name: {part: len(examples) - len(parts[name].get(part, ([], None))[0]) for part in INPUT_FIELDS}
        for name, examples in splits.items()
    }
    pairs = {}
    for a, b in combinations(splits, 2):
        labels_a, labels_b = [e.task for e in splits[a]], [e.task for e in splits[b]]
        subsets = {OVERALL: (set(range(len(labels_a))), set(range(len(labels_b))))}
        for label in sorted(set(labels_a) & set(labels_b)):
            subsets[label] = (
                {i for i, x in enumerate(labels_a) if x == label},
                {i for i, x in enumerate(labels_b) if x == label},
            )
        pairs[f"{a} vs {b}"] = {
            subset: {part: _jsd(parts[a].get(part), parts[b].get(part), ka, kb, weighting) for part in INPUT_FIELDS}
            for subset, (ka, kb) in subsets.items()
        }
    return {
        "records": {name: len(examples) for name, examples in splits.items()},
        "records_without_part": missing,
        "weighting": weighting,
        "encoder": embedder.describe(),
        "pairs": pairs,
    }


def shift_section(found: Mapping[str, Any]) -> str:
    encoder = found["encoder"]
    lines = [
        "## Shift between splits (R-EMID's representation JSD)",
        "",
        f"Encoder `{encoder['encoder']}` (layer {encoder['layer']}, {encoder['pooling']}), weighting "
        f"`{found['weighting']}` (equal: 0 = same distribution, ln 2 = the most apart). Records: "
        + ", ".join(f"{name} {n}" for name, n in found["records"].items())
        + ".",
    ]
    if encoder.get("fallback_reason"):
        lines.append(f"\n{encoder['fallback_reason']}.")
    for pair, subsets in found["pairs"].items():
        lines += ["", f"### {pair}", "", "| subset | " + " | ".join(INPUT_FIELDS) + " | records |"]
        lines.append("| --- |" + " --- |" * (len(INPUT_FIELDS) + 1))
        for subset, by_part in subsets.items():
            values = ["–" if by_part[p]["jsd"] is None else f"{by_part[p]['jsd']:.4f}" for p in INPUT_FIELDS]
            counts = by_part["dialogue"]["n"]
            lines.append(f"| {subset} | " + " | ".join(values) + f" | {counts[0]} / {counts[1]} |")
    return "\n".join(lines)
