"""The import graph runs one way: data <- models, scoring <- objectives / eval / probes <- training <- pipeline.

Every ``import`` of every rpbench module (module level or inside functions) is read with ``ast``; a
module may import its own layer and the layers below, never one above, and objectives, eval and probes
do not import each other (nor do models and scoring). The ``rpbench.serve`` package (which loads models to
serve them) is pipeline level. The top-level modules are a fixed list (docs/architecture.md): a concern gets a folder.
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path
from unittest.mock import ANY

import pytest

from conftest import judge_config

PACKAGE = Path(__file__).resolve().parents[1] / "rpbench"

BASE = {"rpbench"}  # the package itself (its __init__ registers the config resolvers)
LAYERS = {
    "rpbench.core": -1,  # the base (errors, registry, typed settings, atomic files, distributed, quiet): imports none
    "rpbench.data": 0,
    "rpbench.models": 1,
    "rpbench.scoring": 1,  # metrics, judge, score formatting: shared by rewards, evaluation and probes
    "rpbench.objectives": 2,
    "rpbench.eval": 2,
    "rpbench.probes": 2,
    "rpbench.synth": 2,  # task=synthesize: data written by a generator model (the chat client)
    "rpbench.training": 3,  # the Trainer, its callbacks, resume and trainer checks: objectives run under it
}
PIPELINE = 4
# The run's own modules (pipeline level) beside the shared helpers; anything else belongs in a package.
RUN_MODULES = {
    "rpbench.__main__",  # python -m rpbench: the rpbench command
    "rpbench.loggers",
    "rpbench.pipeline",
    "rpbench.resolvers",
    "rpbench.run_report",
    "rpbench.sweep_summary",
    "rpbench.validate",
}


def module_name(path: Path, root: Path = PACKAGE) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> tuple[int, str]:
    """(level, package) of an rpbench module; modules outside the layer packages are pipeline level."""
    for package, level in LAYERS.items():
        if module == package or module.startswith(package + "."):
            return level, package
    return PIPELINE, module


def imports_of(path: Path, root: Path = PACKAGE) -> list[tuple[int, str]]:
    """(line, module) of every rpbench import in a file, relative imports resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    own = module_name(path, root)
    package = own if path.name == "__init__.py" else own.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            found.append((node.lineno, base))
            if base == "rpbench":  # `from rpbench import serve`: the names are modules
                found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return [(line, name) for line, name in found if name == "rpbench" or name.startswith("rpbench.")]


def violations(root: Path = PACKAGE) -> list[tuple[str, int, str, str]]:
    """(file, line, imported module, why) of every import that points up a layer or sideways."""
    found = []
    for path in sorted(root.rglob("*.py")):
        level, package = layer_of(module_name(path, root))
        for line, target in imports_of(path, root):
            if target in BASE:
                continue
            target_level, target_package = layer_of(target)
            file = path.relative_to(root.parent).as_posix()
            if target_level > level:
                found.append((file, line, target, "a layer above"))
            elif target_level == level < PIPELINE and target_package != package:
                found.append((file, line, target, "a sibling layer"))
    return found


def test_imports_run_one_way():
    assert violations() == []


def in_serve(module: str) -> bool:
    return module == "rpbench.serve" or module.startswith("rpbench.serve.")


def test_serve_is_pipeline_level():
    """The pipeline starts its server (judge=local), validation reads its settings and the command runs it
    (task=serve); nothing else in rpbench imports it."""
    assert layer_of("rpbench.serve.server")[0] == PIPELINE
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    users = {name for name, p in modules.items() if not in_serve(name) and any(in_serve(t) for _, t in imports_of(p))}
    assert users == {"rpbench.cli.job", "rpbench.pipeline", "rpbench.validate"}


def test_importing_the_pipeline_leaves_the_judge_client_as_it_was():
    """No import side effect: the local judge server is handed to open_client, never set by importing the
    pipeline (or rpbench.serve). In-process: the pipeline import is shared with the suite's other tests."""
    import rpbench.scoring.chat.client as client

    before = dict(vars(client))
    import rpbench.pipeline  # noqa: F401

    changed = sorted(k for k in before.keys() | vars(client).keys() if before.get(k) is not vars(client).get(k))
    assert changed == []
    with pytest.raises(ValueError, match="no local judge server was handed in"):
        with client.open_client(judge_config(backend="local", model="local", server={"model": "tiny-qwen2"})):
            pass


def test_top_level_modules_are_the_listed_ones():
    """A new concern is a package (its own folder), not another module beside pipeline.py."""
    top = {module_name(p) for p in PACKAGE.glob("*.py")} - {"rpbench"}
    assert top == RUN_MODULES


@pytest.mark.parametrize(
    ("source", "bad", "why"),
    [
        ("from rpbench.eval.report import sections\n", "rpbench/objectives/x.py", "a sibling layer"),
        ("def f():\n    from rpbench.pipeline import run\n", "rpbench/models/x.py", "a layer above"),
        ("from rpbench.models import load\n", "rpbench/data/x.py", "a layer above"),
        ("from rpbench.data.records import Turn\n", "rpbench/core/x.py", "a layer above"),
        ("from ..objectives import sft\n", "rpbench/eval/x.py", "a sibling layer"),
        ("from rpbench.models import load\n", "rpbench/scoring/x.py", "a sibling layer"),
        ("from rpbench.validate import validate\n", "rpbench/training/x.py", "a layer above"),
        ("from rpbench.training import train\n", "rpbench/objectives/x.py", "a layer above"),
    ],
)
def test_the_check_sees_an_arrow_back_up(tmp_path, source, bad, why):
    """The check itself: a copy of the package with one bad import fails it, naming file and line."""
    copy = tmp_path / "rpbench"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("resources", "__pycache__"))
    (tmp_path / bad).write_text(source)
    assert [v for v in violations(copy) if v[0] == bad] == [(bad, source.count("\n"), ANY, why)]
