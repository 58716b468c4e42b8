"""``plugins``: the user's own modules, imported before validation, register entries like rpbench's files."""

from __future__ import annotations

import pytest

from rpbench.core.errors import ConfigError
from rpbench.validate import validate

PLUGIN = """
from rpbench.scoring.metrics import METRICS


@METRICS.register("plugin_exact_match")
def exact_match(predictions, references):
    return [float(p == r) for p, r in zip(predictions, references)]
"""


def test_a_metric_from_a_plugin_module_is_registered_and_accepted(compose, tmp_path, monkeypatch):
    (tmp_path / "my_rpbench_plugin.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = compose("plugins=[my_rpbench_plugin]", "evaluator.metrics=[plugin_exact_match,rouge1]")

    validate(cfg)  # imports the plugins first

    from rpbench.scoring.metrics import METRICS

    assert METRICS.get("plugin_exact_match")(["a", "b"], ["a", "c"]) == [1.0, 0.0]


def test_an_unknown_metric_without_its_plugin_is_refused(compose):
    cfg = compose("evaluator.metrics=[not_a_registered_metric]")
    with pytest.raises(ConfigError, match="not_a_registered_metric"):
        validate(cfg)


def test_a_plugin_that_cannot_be_imported_is_a_config_error_naming_it(compose):
    cfg = compose("plugins=[no_such_rpbench_plugin]")
    with pytest.raises(ConfigError, match="plugins: cannot import 'no_such_rpbench_plugin'"):
        validate(cfg)
