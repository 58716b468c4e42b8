"""Activation probes: hooks, streaming top-p% frequencies, run comparison, neuron restraint."""

from rpbench.core.registry import import_modules
from rpbench.probes.collect import collect_frequencies
from rpbench.probes.compare import compare_runs, most_changed_neurons
from rpbench.probes.hooks import HookPoint, attach, find_hook_points, resolve_hook_points
from rpbench.probes.io import load_stats, save_stats
from rpbench.probes.restraint import restrain, select_neurons
from rpbench.probes.stats import FrequencyStats, ProbeSettings

import_modules(__name__, __path__)  # every probe file registers itself (stage.PROBES)

__all__ = [
    "FrequencyStats",
    "HookPoint",
    "ProbeSettings",
    "attach",
    "collect_frequencies",
    "compare_runs",
    "find_hook_points",
    "load_stats",
    "most_changed_neurons",
    "resolve_hook_points",
    "restrain",
    "save_stats",
    "select_neurons",
]
