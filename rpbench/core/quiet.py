"""Console hygiene: a run's terminal shows progress and results, not the libraries' chatter."""

from __future__ import annotations

import logging
import warnings

# One INFO line per HTTP request (httpx: "HTTP/1.1 200 OK"; openai: retries) is noise at run level; so are
# faiss's CPU-feature probing and sentence-transformers' "loading from <path>" (task=synthesize).
CHATTY_LOGGERS = ("httpx", "httpx2", "httpcore", "openai", "faiss.loader", "sentence_transformers")


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
