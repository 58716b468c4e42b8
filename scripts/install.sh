#!/usr/bin/env bash
# Install rpbench and the system data it needs (WordNet 3.0 for METEOR), with no downloads at run time.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -d /usr/share/wordnet ] && command -v apt-get >/dev/null; then
  SUDO=$([ "$(id -u)" = 0 ] && echo "" || echo sudo)
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq wordnet-base >/dev/null
fi
python -m pip install -q -e ".[dev]"
