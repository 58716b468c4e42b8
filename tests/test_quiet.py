"""What rpbench.core.quiet drops from a run's console: library notices nobody can act on."""

from __future__ import annotations

import logging
import warnings

import pytest
import torch
from torch.utils.cpp_extension import _find_cuda_home

from rpbench.core.quiet import quiet_libraries


@pytest.mark.skipif(torch.cuda.is_available(), reason="torch says it only where no CUDA runtime is found")
def test_torch_s_notice_that_it_found_no_cuda_runtime_is_dropped(tmp_path, monkeypatch, caplog):
    """What torch logs when DeepSpeed builds its CPU ops on a machine with a CUDA toolkit but no GPU."""
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    source = logging.getLogger("torch.utils.cpp_extension")
    for changed in (source, logging.getLogger("lightning")):  # what quiet_libraries changes goes with the test
        monkeypatch.setattr(changed, "filters", list(changed.filters))
        monkeypatch.setattr(changed, "handlers", list(changed.handlers))
    monkeypatch.setattr(warnings, "filters", list(warnings.filters))
    source.addHandler(caplog.handler)  # torch's loggers may not propagate to the root's capture
    try:
        quiet_libraries()
        assert _find_cuda_home() == str(tmp_path)
    finally:
        source.removeHandler(caplog.handler)
    assert "No CUDA runtime" not in caplog.text
