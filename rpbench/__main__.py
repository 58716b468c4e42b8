"""``python -m rpbench <command> ...``: the ``rpbench`` command."""

from rpbench.cli import main

main()
