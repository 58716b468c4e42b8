"""RPGBench's evaluation (the R-EMID paper): the benchmark (``evaluator``: WinRate, JS severity, R-EMI / R-EMID
and the bound per shift category) and its report sections and plots (``report``). Importing the package
imports (registers) every module in it."""

from rpbench.core.registry import import_modules

import_modules(__name__, __path__)
