"""Console hygiene: a run's terminal shows progress and results, not the libraries' chatter."""

from __future__ import annotations

import logging
import sys
import warnings
from pathlib import Path

# One INFO line per HTTP request (httpx: "HTTP/1.1 200 OK"; openai: retries) is noise at run level; so are
# faiss's CPU-feature probing, sentence-transformers' "loading from <path>" (task=synthesize) and rouge-score's
# "Using default tokenizer" (absl), once per ROUGE type.
CHATTY_LOGGERS = ("httpx", "httpx2", "httpcore", "openai", "faiss.loader", "sentence_transformers", "absl")
INSTALLED = ("site-packages", "dist-packages")  # the folders installed libraries live in


def library_module(filename: str) -> str | None:
    """The dotted module name of ``filename`` when it lies in an installed library, else None (rpbench's own
    code, a script, a test)."""
    parts = Path(filename).with_suffix("").parts
    found = [i for i, part in enumerate(parts) if part in INSTALLED]
    if not found:
        return None
    return ".".join(parts[found[-1] + 1 :]) or None


class LibraryWarnings:
    """``warnings.showwarning`` for the run: a library's warning is one logged line, its message under the
    emitting module's name, without the file path (Lightning prints ``<site-packages path>:<line>: ...``);
    any other warning is shown as before."""

    def __init__(self, shown):
        self.shown = shown

    def __call__(self, message, category, filename, lineno, file=None, line=None) -> None:
        module = library_module(filename)
        if module is None:
            self.shown(message, category, filename, lineno, file, line)
            return
        logging.getLogger(module).warning("%s", " ".join(str(message).split()))


class DropMessages(logging.Filter):
    """Drops records whose message starts with one of ``prefixes``."""

    def __init__(self, *prefixes: str):
        super().__init__()
        self.prefixes = prefixes

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.prefixes)


def quiet_libraries() -> None:
    """Call once logging is configured (Hydra's handlers in place). Each rule names the message it drops."""
    for name in CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    import lightning  # noqa: F401  its package logger has its own stderr handler: every record would print twice

    package_logger = logging.getLogger("lightning")
    for handler in list(package_logger.handlers):
        package_logger.removeHandler(handler)
    # An advertisement, logged at INFO by every Trainer.
    logging.getLogger("lightning.pytorch.utilities.rank_zero").addFilter(DropMessages("💡 Tip:"))
    # DeepSpeed's import-time guess, said on every CPU run; the run's own accelerator is logged by Lightning.
    logging.getLogger("DeepSpeed").addFilter(DropMessages("Setting accelerator to CPU"))
    # Said without CUDA when DeepSpeed builds its CPU ops (CPU Adam, shared-memory collectives): nothing to act on.
    logging.getLogger("torch.utils.cpp_extension").addFilter(DropMessages("No CUDA runtime is found"))
    # Lightning calls a torch API deprecated in its own code; nothing in ours to change.
    warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated", module="lightning")
    # Our run folder always holds config.yaml before the CSV logger starts: not earlier logs. A resumed
    # run's earlier metrics.csv is kept as metrics.<k>.csv (rpbench.loggers.keep_earlier_curves).
    warnings.filterwarnings(
        "ignore", message="Experiment logs directory .* exists and is not empty", module="lightning"
    )
    # A frozen reference model (DPO, GRPO) sits in the module in eval mode on purpose.
    warnings.filterwarnings("ignore", message=r"Found \d+ module\(s\) in eval mode at the start of training")
    # DeepSpeed's ZeRO collectives call torch APIs deprecated in torch 2.14: one warning per call otherwise.
    warnings.filterwarnings(
        "ignore", message=r"`torch\.distributed\.(all_gather_into_tensor|reduce_scatter_tensor)` is deprecated"
    )
    # Several ranks: the held-out loss is summed over the ranks before it is logged (ObjectiveModule.
    # on_validation_epoch_end), so Lightning's advice to sync it again does not apply.
    warnings.filterwarnings("ignore", message=r"It is recommended to use `self\.log\('val/", module="lightning")
    if not isinstance(warnings.showwarning, LibraryWarnings):  # a sweep's jobs call this in one process
        warnings.showwarning = LibraryWarnings(warnings.showwarning)
    if not sys.stderr.isatty():  # a log file: no bars of loading or writing weights, each a \r-joined line
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()
