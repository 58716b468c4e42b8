"""The import graph runs one way: data <- models, scoring <- objectives / eval / probes <- training <- pipeline.

Every ``import`` of every rpbench module (module level or inside functions) is read with ``ast``; a
module may import its own layer and the layers below, never one above, and objectives, eval and probes
do not import each other (nor do models and scoring). The ``rpbench.serve`` package (which loads models to
serve them) is pipeline level. The top-level modules are a fixed list (docs/architecture.md): a concern gets a folder.

The tests' own imports: a test takes shared set-up as a fixture of tests/conftest.py, never imports conftest or
another test module.
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path
from unittest.mock import ANY

import pytest

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


@pytest.mark.slow
def test_serve_is_pipeline_level():
    """The pipeline starts its server (judge=local), validation reads its settings and the command runs it
    (task=serve); nothing else in rpbench imports it."""
    assert layer_of("rpbench.serve.server")[0] == PIPELINE
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    users = {name for name, p in modules.items() if not in_serve(name) and any(in_serve(t) for _, t in imports_of(p))}
    assert users == {"rpbench.cli.job", "rpbench.pipeline", "rpbench.validate"}


def test_importing_the_pipeline_leaves_the_judge_client_as_it_was(judge_config):
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


@pytest.mark.slow
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


TESTS = Path(__file__).resolve().parent


def imported_modules(node: ast.Import | ast.ImportFrom) -> list[tuple[str, list[str]]]:
    """(module name, its components that can name a module of tests/) of each module an import names: a top-level
    module is its first component (``conftest``, ``test_run``); ``tests.x.y`` and a relative import, all of them."""
    if isinstance(node, ast.Import):
        return [(alias.name, alias.name.split(".")[:1]) for alias in node.names]
    base = node.module or ""
    names = [base, *(f"{base}.{alias.name}".lstrip(".") for alias in node.names)] if node.level else [base]
    if not node.level and (base == "tests" or base.startswith("tests.")):
        names += [f"{base}.{alias.name}" for alias in node.names]  # `from tests(.x) import y`: y may be a module
    found = []
    for name in filter(None, names):
        parts = name.split(".")
        found.append((name, parts if node.level else parts[1:] if parts[0] == "tests" else parts[:1]))
    return found


def helper_imports(root: Path = TESTS) -> list[tuple[str, int, str]]:
    """(file, line, module) of every import of conftest or of a test module (``test_*``) in a file under ``root``:
    shared set-up comes to a test as a fixture of tests/conftest.py, never as a helper imported from it or from
    another test's module (a plain module of test doubles beside them, such as scripted_server.py, is fine)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        if path.name == "conftest.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for name, parts in imported_modules(node):
                if any(part == "conftest" or part.startswith("test_") for part in parts):
                    found.append((path.relative_to(root).as_posix(), node.lineno, name))
                    break
    return found


def test_tests_take_shared_set_up_as_fixtures():
    assert helper_imports() == []


@pytest.mark.parametrize(
    ("source", "file", "module"),
    [
        ("from conftest import run_in_process\n", "test_x.py", "conftest"),
        ("def test_y():\n    from conftest import composed\n", "eval/test_x.py", "conftest"),
        ("import conftest\n", "test_x.py", "conftest"),
        ("from test_run import FAST\n", "test_x.py", "test_run"),
        ("import test_run\n", "objectives/test_x.py", "test_run"),
        ("from tests.test_run import FAST\n", "test_x.py", "tests.test_run"),
        ("from tests import conftest\n", "test_x.py", "tests.conftest"),
        ("from conftest import RawReply\n", "doubles.py", "conftest"),
        ("from .test_run import FAST\n", "test_x.py", "test_run"),
        ("from tests.objectives.test_dpo import PAIRS\n", "test_x.py", "tests.objectives.test_dpo"),
    ],
)
def test_the_check_sees_a_helper_imported_by_a_test(tmp_path, source, file, module):
    """The check itself: one bad import among allowed ones (conftest.py importing a module of test doubles, a
    test importing that module or rpbench) is found, naming file and line."""
    (tmp_path / "conftest.py").write_text("from doubles import Stub\n")
    (tmp_path / "test_ok.py").write_text("from doubles import Stub\nfrom rpbench.core.paths import CONF_DIR\n")
    (tmp_path / file).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / file).write_text(source)
    assert helper_imports(tmp_path) == [(file, source.count("\n"), module)]
