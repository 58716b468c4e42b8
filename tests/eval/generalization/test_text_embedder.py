"""The text embedder against sentence-transformers, and shift severity on the bundled RPGBench sample."""

import functools
from importlib import resources
from pathlib import Path

import pytest
import torch

from rpbench.data.rpgbench import read_test
from rpbench.eval.generalization.embed import load_text_embedder
from rpbench.eval.generalization.rjsd import representation_jsd
from rpbench.eval.generalization.shift import dialogue_text, embed_split, input_field_texts, shift_severity
from rpbench.scoring.metrics import fallback_model_path

TEXTS = ["The lamp is lit every night.", "Ich backe Brot in Leeds.", "A wild orchid, rare in these parts."]
SAMPLE = Path(str(resources.files("rpbench") / "resources" / "sample" / "rpgbench" / "rpgbench.json"))


@functools.cache
def embedder(layer: int = -1):
    return load_text_embedder(layer=layer, device="cpu", batch_size=2)


def test_last_layer_equals_sentence_transformers_encode():
    from sentence_transformers import SentenceTransformer

    peer = SentenceTransformer(fallback_model_path(), device="cpu")
    expected = peer.encode(TEXTS, convert_to_tensor=True, normalize_embeddings=True).cpu()
    got = embedder().embed(TEXTS)
    assert got.n_truncated == 0
    assert torch.allclose(got.vectors, expected, atol=1e-5)


def test_layer_zero_pools_the_embedding_layer():
    e = embedder(0)
    batch = e.tokenizer(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        tokens = e.model.embeddings(input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"])
    mask = batch["attention_mask"][..., None].float()
    expected = torch.nn.functional.normalize((tokens * mask).sum(1) / mask.sum(1), dim=-1)
    assert torch.allclose(e.embed(TEXTS).vectors, expected, atol=1e-5)
    assert e.describe()["layer"] == 0


def test_truncation_is_counted_and_bad_inputs_are_named():
    e = load_text_embedder(max_length=10, device="cpu")
    assert e.embed(TEXTS).n_truncated == 1  # 9, 10 and 11 tokens with [CLS] and [SEP]
    with pytest.raises(ValueError, match=r"golden_response\[1\]"):
        e.embed(["fine", "  "], name="golden_response")
    with pytest.raises(ValueError, match="layer 9 outside"):
        load_text_embedder(layer=9, device="cpu")


def test_shift_severity_on_the_bundled_sample():
    examples = read_test(SAMPLE).examples
    by_shift = {}
    for e in examples:
        by_shift.setdefault(e.meta["shift"], []).append(e)
    id_examples, composition = by_shift["in_distribution"], by_shift["composition"]
    assert len(id_examples) == len(composition) == 6
    long_dialogue = next(e for e in composition if len(e.prompt) > 4)
    assert dialogue_text(long_dialogue).startswith(
        f"User Query 1: {long_dialogue.prompt[1].content}\nAgent Response 1: "
    )
    assert input_field_texts(id_examples)["user"][0] == id_examples[0].meta["persona"]

    e = embedder()
    id_split = embed_split(e, id_examples, [x.reference for x in id_examples])
    shifted = embed_split(e, composition, ["I see."] * len(composition))
    same = shift_severity(id_split, id_split)
    assert max(abs(v) for v in same.input_terms().values()) < 1e-9 and abs(same.delta_p) < 1e-9
    severity = shift_severity(id_split, shifted)
    assert severity.dialogue > 0.05 and severity.delta_q > 0.05  # one fixed reply vs varied golden ones
    assert severity.user == pytest.approx(representation_jsd(id_split.user, shifted.user))
    assert (severity.n_id, severity.n_ood) == (6, 6)
