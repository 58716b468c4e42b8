"""Files published whole or not at all: a SIGKILL mid-export leaves the previous model folder intact."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch
from transformers import AutoModelForCausalLM

from rpbench.core.atomic import partial_path, publish
from rpbench.models import load, save_hf


@pytest.fixture(scope="module")
def model_cfg(tiny_settings):
    """tiny-qwen2's settings."""
    return tiny_settings(end_of_turn="<|im_end|>")


# Export a differently initialised model over `out`, killed (SIGKILL) once the weights are written and
# before the tokenizer files are.
KILLED_EXPORT = textwrap.dedent(
    """
    import os, signal, sys
    from dataclasses import replace
    from rpbench.models import load, save_hf
    from rpbench.models.config_tree import compose_model_config
    model, tokenizer = load(replace(compose_model_config("tiny-qwen2"), init_seed=1))
    tokenizer.save_pretrained = lambda *args, **kwargs: os.kill(os.getpid(), signal.SIGKILL)
    save_hf(model, tokenizer, sys.argv[1])
    """
)


def test_publish_replaces_a_file_and_a_full_folder(tmp_path):
    target = tmp_path / "last.ckpt"
    target.write_text("old")
    partial_path(target).write_text("new")
    publish(partial_path(target), target)
    assert target.read_text() == "new" and not partial_path(target).exists()

    folder = tmp_path / "model"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "old.bin").write_text("old")
    partial_path(folder).mkdir()
    (partial_path(folder) / "new.bin").write_text("new")
    publish(partial_path(folder), folder)
    assert [p.name for p in folder.iterdir()] == ["new.bin"] and not partial_path(folder).exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt", "model"]  # nothing left aside


@pytest.mark.slow
def test_a_kill_during_export_leaves_the_previous_model_whole(tmp_path, repo_root, offline_env, model_cfg):
    out = tmp_path / "model"
    model, tokenizer = load(model_cfg)
    save_hf(model, tokenizer, out)
    before = sorted(p.name for p in out.iterdir())

    killed = subprocess.run(
        [sys.executable, "-c", KILLED_EXPORT, str(out)],
        cwd=repo_root,
        env={**os.environ, **offline_env},
        capture_output=True,
        timeout=300,
        check=False,
    )
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert (partial_path(out) / "model.safetensors").exists()  # it was killed after writing the new weights
    assert sorted(p.name for p in out.iterdir()) == before
    reloaded = AutoModelForCausalLM.from_pretrained(out)
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(reloaded.state_dict()[name], tensor)

    save_hf(model, tokenizer, out)  # the next export clears the leftover
    assert not partial_path(out).exists()
