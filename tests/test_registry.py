"""The one registration idiom every extension point uses."""

import pytest

from rpbench.registry import Registry


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
