"""Train and/or evaluate one configuration: `python run.py [group=option ...] [key=value ...]` (`rpbench train`)."""

import sys

from rpbench.cli.commands import train

if __name__ == "__main__":
    train(sys.argv[1:])
