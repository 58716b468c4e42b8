"""Whole-conversation evaluation: the benchmark (``evaluator``), the session loop with the simulated user
(``sessions``), persona drift without a judge (``drift``) and pairwise session verdicts (``pairwise``).
Importing the package imports (registers) every module in it."""

from rpbench.core.registry import import_modules

import_modules(__name__, __path__)
