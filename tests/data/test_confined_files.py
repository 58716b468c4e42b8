"""Files a record names stay inside their root: traversal, absolute paths and escaping symlinks are
record errors (file, record, field), on real files; the bundled MMRole sample finds all its images."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from rpbench.core.errors import DataFormatError
from rpbench.data import readers
from rpbench.data.files import confined_path
from rpbench.data.mmrole.reader import MMRoleOptions
from rpbench.data.prepare import read_split
from rpbench.data.settings import data_spec

WHERE = {"file": "data.json", "record": 7, "field": "image"}


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """tmp/secret.txt outside tmp/data/images, which holds ok.jpg, sub/, a symlink inside and one out."""
    (tmp_path / "secret.txt").write_text("TOP SECRET")
    images = tmp_path / "data" / "images"
    (images / "sub").mkdir(parents=True)
    (images / "ok.jpg").write_bytes(b"\xff\xd8 a picture")
    os.symlink("ok.jpg", images / "alias.jpg")
    os.symlink(tmp_path / "secret.txt", images / "escape.jpg")
    os.symlink(tmp_path, images / "up")
    return tmp_path


def test_names_inside_the_root_are_resolved(tree):
    root = tree / "data" / "images"
    ok = (root / "ok.jpg").resolve()
    assert confined_path(root, "ok.jpg", **WHERE) == ok
    assert confined_path(root, "sub/../ok.jpg", **WHERE) == ok
    assert confined_path(root, "alias.jpg", **WHERE) == ok  # a symlink that stays inside is fine
    assert confined_path(root, str(root / "ok.jpg"), **WHERE) == ok  # an absolute path inside the root too
    assert confined_path(root, "COCO/missing.jpg", **WHERE) == root.resolve() / "COCO" / "missing.jpg"
    assert confined_path(None, "COCO/x.jpg", **WHERE) == Path("COCO/x.jpg")


@pytest.mark.parametrize(
    "name",
    ["../../secret.txt", "sub/../../../secret.txt", "SECRET_ABSOLUTE", "/etc/passwd", "escape.jpg", "up/secret.txt"],
)
def test_names_leaving_the_root_are_errors_naming_file_record_and_field(tree, name):
    name = str(tree / "secret.txt") if name == "SECRET_ABSOLUTE" else name
    with pytest.raises(DataFormatError) as caught:
        confined_path(tree / "data" / "images", name, **WHERE)
    error = caught.value
    assert (error.path, error.record, error.field) == ("data.json", 7, "image")
    assert repr(name) in str(error) and "outside" in error.problem


@pytest.mark.parametrize("name", ["../x.jpg", "/etc/passwd", "a/../../x.jpg"])
def test_without_a_root_only_plain_relative_names_pass(name):
    with pytest.raises(DataFormatError, match=r"data\.json: record 7: field 'image'"):
        confined_path(None, name, **WHERE)


def test_a_nul_byte_is_a_record_error(tree):
    with pytest.raises(DataFormatError, match="field 'image'"):
        confined_path(tree, "a\0b.jpg", **WHERE)


def mmrole_record(rid: str, image: str) -> dict:
    return {
        "id": rid,
        "system": "Stay in character.",
        "image": image,
        "role": "Ann",
        "script": "Tales",
        "other_role": "a curious human",
        "conversations": [{"from": "user", "value": "Look!"}, {"from": "assistant", "value": "Lovely."}],
    }


def test_mmrole_reader_refuses_images_outside_the_root(tree):
    root = tree / "data" / "images"
    hostile = ["../../../../etc/passwd", "/etc/passwd", "escape.jpg", str(tree / "secret.txt")]
    records = [mmrole_record("good", "ok.jpg")] + [mmrole_record(f"bad{i}", name) for i, name in enumerate(hostile)]
    path = tree / "data" / "comment_test.json"
    path.write_text(json.dumps(records))
    rooted = MMRoleOptions(image_root=str(root), default_system=None, per_turn_samples=False)
    skip = replace(readers.STRICT, on_error="skip")
    for split in ("test", "train"):
        with pytest.raises(DataFormatError) as caught:
            readers.read("mmrole", split, path, rooted)
        assert (caught.value.path, caught.value.record, caught.value.field) == (str(path), "1 (id 'bad0')", "image")
        result = readers.read("mmrole", split, path, rooted, skip)
        assert [e.id for e in result.examples] == ["good"] and len(result.skipped) == len(hostile)
        assert all("field 'image'" in s for s in result.skipped)
        turns = result.examples[0].prompt if split == "test" else result.examples[0].turns
        assert [t.image for t in turns if t.image] == [str((root / "ok.jpg").resolve())]
    unrooted = replace(rooted, image_root=None)
    result = readers.read("mmrole", "test", path, unrooted, skip)  # no root: absolute and '..' names still refused
    assert [e.id for e in result.examples] == ["good", "bad2"]


def test_bundled_mmrole_sample_finds_every_image(compose):
    data = compose("data=sample_mmrole").data
    for split in ("train", "test"):
        result = read_split(data_spec(data), split)
        images = [t.image for e in result.examples for t in (e.turns if split == "train" else e.prompt) if t.image]
        assert result.skipped == [] and len(images) == len(result.examples) > 0
        assert all(Path(image).is_file() for image in images), images
