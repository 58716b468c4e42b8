"""pyproject's dependencies against the code: what is imported is declared, what is declared is used."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

# Declared without an import in rpbench, each for a reason.
USED_WITHOUT_IMPORT = {
    "gguf": "transformers reads model.gguf_file checkpoints through it (rpbench/models/gguf.py)",
    "hydra-submitit-launcher": "conf/hydra/launcher/slurm.yaml (hydra.launcher: submitit_slurm)",
    "torchvision": "transformers' fast image processors (multimodal models) import it",
    "wandb": "Lightning's WandbLogger (logger=wandb) imports it",
}

# Imported only where installed (a GPU machine), declared in an extra instead: module -> (extra, distribution).
OPTIONAL_IMPORTS = {"liger_kernel": ("gpu", "liger-kernel"), "vllm": ("vllm", "vllm")}


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared(repo_root: Path) -> set[str]:
    project = tomllib.loads((repo_root / "pyproject.toml").read_text())["project"]
    return {normalized(re.split(r"[<>=!~\[; ]", spec, maxsplit=1)[0]) for spec in project["dependencies"]}


def imported_modules(repo_root: Path) -> set[str]:
    files = [*(repo_root / "rpbench").rglob("*.py"), repo_root / "run.py", repo_root / "sweep.py"]
    names = set()
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - {"rpbench", "run", "sweep", "__future__"}  # ours


def test_every_import_is_declared_and_every_declaration_is_used(repo_root):
    providers = packages_distributions()
    imported = imported_modules(repo_root) - set(OPTIONAL_IMPORTS)
    unknown = sorted(m for m in imported if m not in providers)
    assert not unknown, f"imported but installed by no distribution: {unknown}"
    needed = {m: {normalized(d) for d in providers[m]} for m in imported}
    missing = sorted(m for m, dists in needed.items() if not dists & declared(repo_root))
    assert not missing, f"imported, not declared in pyproject dependencies: {missing}"
    used = set().union(*needed.values()) | set(USED_WITHOUT_IMPORT)
    unused = sorted(declared(repo_root) - used)
    assert not unused, f"declared, never imported (move to an extra, or say why in USED_WITHOUT_IMPORT): {unused}"


def test_optional_imports_are_declared_in_their_extra(repo_root):
    extras = tomllib.loads((repo_root / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for module, (extra, distribution) in OPTIONAL_IMPORTS.items():
        names = {normalized(re.split(r"[<>=!~\[; ]", spec, maxsplit=1)[0]) for spec in extras[extra]}
        assert distribution in names, f"{module}: declare {distribution} in the {extra!r} extra"
    assert set(OPTIONAL_IMPORTS) <= imported_modules(repo_root), "an optional import is no longer used: drop it here"
