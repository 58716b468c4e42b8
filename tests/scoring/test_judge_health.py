"""The parse-failure warning's threshold, by hand."""

from rpbench.scoring.judge.health import parse_failure_warning


def test_warns_only_above_the_limit():
    assert parse_failure_warning(2, 10, 0.2) is None  # 20% is not above 20%
    warning = parse_failure_warning(3, 10, 0.2)
    assert warning is not None and "3 of 10" in warning and "30%" in warning
    assert parse_failure_warning(0, 0, 0.2) is None  # nothing judged: nothing to warn about
