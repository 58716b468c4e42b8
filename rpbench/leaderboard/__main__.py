"""``python -m rpbench.leaderboard``: ``rpbench.leaderboard.cli.main``."""

import sys

from rpbench.leaderboard.cli import main

sys.exit(main())
