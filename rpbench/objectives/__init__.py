"""Training objectives: pure loss and reward functions, and one registered LightningModule per objective.

Importing the package imports each of its modules: every objective and reward file registers itself."""

from rpbench.core.registry import import_modules

import_modules(__name__, __path__)
