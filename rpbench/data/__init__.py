"""Data layer: benchmark readers, records, chat rendering, batching.

Importing the package imports each of its modules, so every format file registers itself (``readers.FORMATS``).
"""

from rpbench.core.registry import import_modules

import_modules(__name__, __path__)
