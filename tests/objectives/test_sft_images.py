"""SFT with images on the bundled MMRole sample (tiny Qwen2-VL, real Lightning runs), the images setting of
the data, and every bad image named by its record."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from omegaconf import open_dict

from rpbench import pipeline
from rpbench.core.errors import ConfigError, DataFormatError
from rpbench.data.prepare import read_split
from rpbench.data.records import image_count
from rpbench.data.settings import data_spec
from rpbench.models import load
from rpbench.models.vision import ImageTextTokenizer
from rpbench.training import train
from rpbench.validate import validate

SAMPLE = Path(__file__).resolve().parents[2] / "rpbench" / "resources" / "sample" / "mmrole"
QUIET = ["logger=none", "trainer.enable_progress_bar=false", "evaluator=none"]


def run(cfg, out: Path) -> dict:
    """``pipeline.run`` of a composed config, writing to ``out``."""
    with open_dict(cfg):
        del cfg["hydra"]
        cfg.paths.output_dir = str(out)
    return pipeline.run(validate(cfg))


@pytest.mark.slow
def test_sft_with_images_lowers_the_held_out_loss(compose, tmp_path):
    cfg = compose(
        "data=sample_mmrole",
        "model=tiny-qwen2-vl",
        *QUIET,
        "save_model=false",
        "data.max_train_samples=8",
        "objective.epochs=6",
        "objective.batch_size=4",
        "objective.grad_accum=1",
        "objective.lr=1e-2",
        "objective.warmup_ratio=0",
        "objective.scheduler=constant",
    )
    records = read_split(data_spec(cfg.data), "train").examples
    model, tokenizer = load(validate(cfg).model)
    report = train(validate(cfg).training, model, tokenizer, records, records, tmp_path, logger=None)
    before, after = report["held_out"]["before"]["loss"], report["held_out"]["after"]["loss"]
    assert after < 0.8 * before, (before, after)  # 12 steps on 8 samples: about 8.3 -> 6
    assert report["samples"]["images"] == {"train": 8, "val": 8}
    assert report["optimizer_steps"] == 12


def write_records(folder: Path, image: str) -> Path:
    """A copy of the sample's first training record whose image is ``image`` (relative to ``folder/images``)."""
    images = folder / "images"
    images.mkdir(parents=True, exist_ok=True)
    shutil.copy(SAMPLE / "images" / "Friends" / "13.jpg", images / "good.jpg")
    (images / "broken.jpg").write_bytes(b"not a picture at all")
    (folder / "secret.jpg").write_bytes(b"outside")
    record = json.loads((SAMPLE / "train.json").read_text())[0]
    records = [dict(record, id="fine", image="good.jpg"), dict(record, id="bad", image=image)]
    path = folder / "train.json"
    path.write_text(json.dumps(records))
    return path


@pytest.mark.parametrize(
    ("image", "problem"),
    [
        ("missing.jpg", r"image '.*missing\.jpg' does not exist"),
        ("broken.jpg", r"image '.*broken\.jpg' cannot be read"),
        ("../secret.jpg", "a path inside"),  # the reader confines images to data.image_root
    ],
)
def test_every_bad_image_names_its_file_record_and_field(compose, tmp_path, image, problem):
    path = write_records(tmp_path / "data", image)
    cfg = compose(
        "data=sample_mmrole",
        "model=tiny-qwen2-vl",
        *QUIET,
        f"data.files.train={path}",
        f"data.image_root={tmp_path / 'data' / 'images'}",
        "data.val_fraction=0",
    )
    with pytest.raises(DataFormatError, match=problem) as caught:
        run(cfg, tmp_path / "run")
    assert str(path) in str(caught.value) and "'bad'" in str(caught.value) and "field 'image'" in str(caught.value)


def test_images_too_long_for_the_budget_name_their_record(compose, tmp_path):
    cfg = compose("data=sample_mmrole", "model=tiny-qwen2-vl", *QUIET, "data.max_length=8")
    too_long = r"record id '.+': field 'image': its images take 14 tokens, more than the 8"
    with pytest.raises(DataFormatError, match=too_long):
        run(cfg, tmp_path / "run")


@pytest.mark.slow
def test_a_text_only_model_refuses_records_with_images_unless_they_are_dropped(compose, tmp_path):
    with pytest.raises(ConfigError, match=r"training record '.+' has an image, and model=tiny-qwen2 is text-only"):
        run(compose("data=sample_mmrole", "model=tiny-qwen2", *QUIET), tmp_path / "refused")
    cfg = compose("data=sample_mmrole", "model=tiny-qwen2", *QUIET, "data.images=drop", "debug=short")
    results = run(cfg, tmp_path / "run")
    images = sum(image_count(e) for e in read_split(data_spec(cfg.data), "train").examples)
    assert images > 0 and results["records"]["train"]["images_dropped"] == images
    assert results["train"]["samples"]["images"] == {"train": 0, "val": 0}
    saved = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert saved["records"]["train"]["images_dropped"] == images


@pytest.mark.slow
def test_a_vl_model_trains_on_records_without_images(compose, tmp_path):
    results = run(compose("model=tiny-qwen2-vl", *QUIET, "debug=short", "data.max_train_samples=16"), tmp_path)
    assert results["records"]["train"]["images_dropped"] == 0
    assert results["train"]["samples"]["images"] == {"train": 0, "val": 0}
    assert results["train"]["optimizer_steps"] == 3


@pytest.mark.slow
def test_image_settings_that_cannot_work_are_configuration_errors(compose):
    vl = ["data=sample_mmrole", "model=tiny-qwen2-vl"]
    cases = {
        "objective.packing=true: model=tiny-qwen2-vl takes images": [*vl, "objective.packing=true"],
        "model.freeze_vision=True: model=tiny-qwen2 has no vision tower": ["+model.freeze_vision=true"],
        "model.freeze_vision=false with model.lora": [
            *vl,
            "model.freeze_vision=false",
            "model.lora={r: 4, alpha: 8, dropout: 0.0, target_modules: null}",
        ],
        "data.images='sometimes': expected one of keep, drop": ["data.images=sometimes"],
    }
    for message, overrides in cases.items():
        with pytest.raises(ConfigError) as caught:
            validate(compose(*overrides))
        assert message in str(caught.value), str(caught.value)


def test_grpo_refuses_samples_with_images(compose, tmp_path):
    cfg = compose("data=sample_mmrole", "model=tiny-qwen2-vl", "objective=grpo", *QUIET, "data.max_train_samples=4")
    records = read_split(data_spec(cfg.data), "train").examples
    model, tokenizer = load(validate(cfg).model)
    with pytest.raises(ConfigError, match="objective=grpo cannot train on images"):
        train(validate(cfg).training, model, tokenizer, records, records, tmp_path, logger=None)


def test_a_vl_run_exports_a_model_that_reloads_with_its_processor(compose, tmp_path):
    cfg = compose(
        "data=sample_mmrole",
        "model=tiny-qwen2-vl",
        *QUIET,
        "data.max_train_samples=8",
        "objective.epochs=2",
        "objective.grad_accum=1",
    )
    results = run(cfg, tmp_path / "run")
    saved = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert saved["train"]["samples"]["images"] == {"train": 7, "val": 1}
    assert saved["records"]["train"]["images_dropped"] == 0
    assert results["train"]["held_out"]["after"]["loss"] < results["train"]["held_out"]["before"]["loss"]
    model, tokenizer = load(replace(validate(cfg).model, name_or_path=str(tmp_path / "run" / "model")))
    assert isinstance(tokenizer, ImageTextTokenizer) and model.config.model_type == "qwen2_vl"
