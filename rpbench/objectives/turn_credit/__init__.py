"""Per-turn credit in session RL (issue 41): turn rewards (``rewards``) and turn-level advantage estimators
(``advantages``), each a registered function; ``tokens`` spreads a turn's advantage over its tokens."""

from rpbench.core.registry import import_modules

import_modules(__name__, __path__)
