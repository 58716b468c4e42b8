"""MMRole's data (Dai et al., ICLR 2025): the dialogue reader (``reader``), the MMRole-Eval prompts
(``prompts``), the reward model's samples from review files (``reviews``) and from its own training data
(``rm``). Importing the package imports (registers) every module in it."""

from rpbench.core.registry import import_modules

import_modules(__name__, __path__)
