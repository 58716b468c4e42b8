"""Data layer: benchmark readers, records, chat rendering, batching.

Importing the package registers the built-in data formats (``readers.FORMATS``).
"""

from rpbench.data import custom, mmrole, rolemrc, rpgbench  # noqa: F401  (each registers its format)
