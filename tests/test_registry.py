"""The one registration idiom every extension point uses."""

import pytest

from rpbench.core.registry import Registry


def test_register_get_names_and_contains():
    shapes = Registry("shape")

    @shapes.register("square")
    def square(x):
        return x * x

    shapes.register("cube")(lambda x: x**3)
    assert shapes.get("square") is square and shapes.get("cube")(2) == 8
    assert shapes.names() == ["cube", "square"] and "cube" in shapes and "circle" not in shapes


def test_a_taken_name_and_an_unknown_name_are_errors_naming_the_kind():
    shapes = Registry("shape")
    shapes.register("square")(int)
    with pytest.raises(ValueError, match="shape 'square' is already registered"):
        shapes.register("square")(float)
    with pytest.raises(ValueError, match="unknown shape 'circle'; registered: square$"):
        shapes.get("circle")
    with pytest.raises(ValueError, match=r"unknown shape 'x'; registered: \(none\)"):
        Registry("shape").get("x")


def test_import_modules_registers_every_file_of_a_package(tmp_path, monkeypatch):
    """A package whose __init__ calls import_modules: two files dropped in register without being named."""
    package = tmp_path / "dropin"
    package.mkdir()
    (package / "__init__.py").write_text(
        "from rpbench.core.registry import Registry, import_modules\nSHAPES = Registry('shape')\n"
        "import_modules(__name__, __path__)\n"
    )
    (package / "square.py").write_text("from dropin import SHAPES\nSHAPES.register('square')(lambda x: x * x)\n")
    (package / "cube.py").write_text("from dropin import SHAPES\nSHAPES.register('cube')(lambda x: x**3)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import dropin

    assert dropin.SHAPES.names() == ["cube", "square"] and dropin.SHAPES.get("cube")(3) == 27


@pytest.mark.slow
def test_each_registry_package_imports_all_its_modules():
    """Importing a registry's package (and nothing else) imports every module in it, so a new file is used."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    packages = ["data", "scoring", "eval.benchmarks", "models.families", "objectives", "probes"]
    rpbench = root / "rpbench"
    per_benchmark = ["data", "eval.benchmarks"]  # one sub-package per benchmark: its modules register too
    files = {f for p in packages for f in (rpbench / p.replace(".", "/")).glob("*.py")}
    files |= {f for p in per_benchmark for f in (rpbench / p.replace(".", "/")).glob("*/*.py")}
    expected = {".".join(("rpbench", *f.relative_to(rpbench).with_suffix("").parts)) for f in files}
    expected = {name.removesuffix(".__init__") for name in expected}
    script = (
        "import sys, importlib\n"
        f"for p in {packages!r}: importlib.import_module('rpbench.' + p)\n"
        f"print(sorted(set({sorted(expected)!r}) - set(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
