"""CoSER given-circumstance acting: the benchmark (``evaluator``) and the scene's other parties between the
evaluated character's turns (``scene``). Importing the package imports (registers) every module in it."""

from rpbench.core.registry import import_modules

import_modules(__name__, __path__)
