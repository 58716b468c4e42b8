"""``python -m rpbench.conversation_variance``: ``rpbench.conversation_variance.cli.main``."""

import sys

from rpbench.conversation_variance.cli import main

sys.exit(main())
