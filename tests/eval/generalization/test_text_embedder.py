"""The text embedder against sentence-transformers and per-text pooling by hand, and shift severity on the
bundled RPGBench sample."""

import functools
from importlib import resources
from pathlib import Path

import pytest
import torch

from rpbench.data import readers
from rpbench.data.records import Turn
from rpbench.data.remid_prompts import format_dialogue
from rpbench.eval.generalization.embed import PACKAGED_ENCODER, load_text_embedder
from rpbench.eval.generalization.rjsd import representation_jsd
from rpbench.eval.generalization.severity import embed_split, input_field_texts, shift_severity
from rpbench.scoring.metrics import fallback_model_path

TEXTS = ["The lamp is lit every night.", "Ich backe Brot in Leeds.", "A wild orchid, rare in these parts."]
SAMPLE = Path(str(resources.files("rpbench") / "resources" / "sample" / "rpgbench" / "rpgbench.json"))


@functools.cache
def embedder(layer: int = -1, pooling: str = "mean"):
    return load_text_embedder(None, layer, 512, pooling, False, device="cpu", batch_size=2)


def per_text_pooling(e, layer: int, skip_first: bool) -> torch.Tensor:
    """Peer: each text alone (no padding), hidden_states[layer] averaged over its tokens (from the second
    one when ``skip_first``), then L2-normalised."""
    rows = []
    for text in TEXTS:
        batch = e.tokenizer(text, return_tensors="pt")
        with torch.no_grad():
            hidden = e.model(**batch, output_hidden_states=True).hidden_states[layer][0]
        rows.append((hidden[1:] if skip_first else hidden).mean(0))
    return torch.nn.functional.normalize(torch.stack(rows), dim=-1)


def test_last_layer_mean_equals_sentence_transformers_encode():
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


@pytest.mark.parametrize("layer", [0, -1])
def test_mean_skip_first_leaves_out_the_first_token_of_each_text(layer):
    # the texts have 9, 10 and 11 tokens: the batch pads the shorter ones, which must not count
    e = embedder(layer, "mean_skip_first")
    got = e.embed(TEXTS).vectors
    assert torch.allclose(got, per_text_pooling(e, layer, skip_first=True), atol=1e-5)
    assert not torch.allclose(got, per_text_pooling(e, layer, skip_first=False), atol=1e-3)
    assert torch.allclose(embedder(layer).embed(TEXTS).vectors, per_text_pooling(e, layer, False), atol=1e-5)
    if layer == 0:  # hidden_states[0] is the embedding layer's output
        ids = e.tokenizer(TEXTS[:1], return_tensors="pt")
        with torch.no_grad():
            embeddings = e.model.embeddings(input_ids=ids["input_ids"], token_type_ids=ids["token_type_ids"])[0]
        assert torch.allclose(got[0], torch.nn.functional.normalize(embeddings[1:].mean(0), dim=0), atol=1e-5)
    assert e.describe()["pooling"] == "mean_skip_first"


def test_missing_encoder_falls_back_to_the_packaged_one_or_raises():
    e = load_text_embedder("no-such-encoder", 0, 512, "mean_skip_first", True, device="cpu")
    info = e.describe()
    assert info["encoder"] == PACKAGED_ENCODER and info["pooling"] == "mean_skip_first" and info["layer"] == 0
    assert "no-such-encoder" in info["fallback_reason"] and PACKAGED_ENCODER in info["fallback_reason"]
    assert torch.allclose(e.embed(TEXTS).vectors, embedder(0, "mean_skip_first").embed(TEXTS).vectors)
    assert embedder().describe()["fallback_reason"] is None
    with pytest.raises(OSError, match="encoder 'no-such-encoder' is not available locally"):
        load_text_embedder("no-such-encoder", 0, 512, "mean_skip_first", False, device="cpu")
    with pytest.raises(ValueError, match="pooling must be one of"):
        load_text_embedder(None, 0, 512, "cls", False, device="cpu")


def test_truncation_is_counted_and_bad_inputs_are_named():
    e = load_text_embedder(None, -1, 10, "mean", False, device="cpu")
    assert e.embed(TEXTS).n_truncated == 1  # 9, 10 and 11 tokens with [CLS] and [SEP]
    with pytest.raises(ValueError, match=r"golden_response\[1\]"):
        e.embed(["fine", "  "], name="golden_response")
    with pytest.raises(ValueError, match="layer 9 outside"):
        load_text_embedder(None, 9, 512, "mean", False, device="cpu")


def test_shift_severity_on_the_bundled_sample(data_options):
    examples = readers.read("rpgbench", "test", SAMPLE, data_options("sample_rpgbench")).examples
    by_shift = {}
    for e in examples:
        by_shift.setdefault(e.meta["shift"], []).append(e)
    id_examples, composition = by_shift["in_distribution"], by_shift["composition"]
    assert len(id_examples) == len(composition) == 6
    fields = input_field_texts(composition)
    long_dialogue = next(e for e in composition if len(e.meta["dialogue"]) > 1)
    k = composition.index(long_dialogue)
    turns = [Turn(t["role"], t["content"]) for t in long_dialogue.meta["dialogue"]]
    assert fields["dialogue"][k] == format_dialogue(turns)
    assert fields["dialogue"][k].startswith(f"User Query 1: {turns[0].content}\nAgent Response 1: {turns[1].content}")
    assert fields["user"][k] == str(long_dialogue.meta["persona"])
    assert fields["character"][k] == str(long_dialogue.meta["character"])  # the record's object, as str()
    with pytest.raises(ValueError, match="meta lacks 'x'"):
        input_field_texts([type(long_dialogue)("r", long_dialogue.prompt, "g", "tag", {})])

    e = embedder()
    id_split = embed_split(e, id_examples, [x.reference for x in id_examples])
    shifted = embed_split(e, composition, ["I see."] * len(composition))
    same = shift_severity(id_split, id_split, "trace")
    assert max(abs(v) for v in same.input_terms().values()) < 1e-9 and abs(same.delta_p) < 1e-9
    severity = shift_severity(id_split, shifted, "equal")
    assert severity.dialogue > 0.05 and severity.delta_q > 0.05  # one fixed reply vs varied golden ones
    assert severity.user == pytest.approx(representation_jsd(id_split.user, shifted.user, "equal"))
    assert severity.delta_p == pytest.approx(0.0, abs=1e-9)  # ID: the model answers the golden responses
    assert (severity.n_id, severity.n_ood, severity.weighting) == (6, 6, "equal")
