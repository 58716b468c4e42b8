"""MMRole's evaluation: the benchmark (``evaluator``), MMRole-Eval's judging and aggregation in the authors'
answers/reviews/results layout (``judging``) and the reward model's agreement (``reward_model``). Importing
the package imports (registers) every module in it."""

from rpbench.core.registry import import_modules

import_modules(__name__, __path__)
