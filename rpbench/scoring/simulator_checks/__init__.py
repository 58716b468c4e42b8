"""Checked simulators: judge-free checks that a simulated user played its part in a conversation session
(``evaluator.simulator_checks``, ``env.simulator_checks``). A session that fails one is left out of the
headline means and of training rewards, as a session cut short is, and counted by check.

``base``: the registry, the thresholds (``SimulatorCheckSettings``) and what a check returns; ``text``: the
word-level measures; ``checks``: the registered checks; ``run``: checking sessions and summarising.
Importing the package imports (registers) every module in it."""

from rpbench.core.registry import import_modules

import_modules(__name__, __path__)
