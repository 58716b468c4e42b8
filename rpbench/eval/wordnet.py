"""Offline WordNet 3.0 for METEOR, built from the system's WordNet files (no download at run time).

Debian/Ubuntu's ``wordnet-base`` package installs the WordNet 3.0 database under /usr/share/wordnet.
NLTK reads the same files from ``<nltk_data>/corpora/wordnet`` but also wants ``lexnames``, which
Debian does not ship; its content is the fixed list of the 45 WordNet lexicographer files, written here.
The copy lives in ``$RPBENCH_CACHE/nltk_data/corpora/wordnet`` (default ``~/.cache/rpbench``).

Debian also lacks ``index.sense`` (sense key -> synset), which NLTK's reader reads at start-up only to map
other WordNet versions onto 3.0 for the multilingual OMW data; this database *is* 3.0, so the reader
below skips that mapping. Sense-key look-ups (``lemma_from_key``) are therefore unavailable; use
``load_wordnet()`` rather than the global ``nltk.corpus.wordnet`` (METEOR here does). The data folder is
appended to ``nltk.data.path``, which NLTK requires of every corpus root it opens.
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
import warnings
from pathlib import Path

import nltk
from nltk.corpus.reader.wordnet import WordNetCorpusReader

SYSTEM_WORDNET = Path("/usr/share/wordnet")
DATABASE_FILES = (
    "data.adj",
    "data.adv",
    "data.noun",
    "data.verb",
    "index.adj",
    "index.adv",
    "index.noun",
    "index.verb",
    "adj.exc",
    "adv.exc",
    "noun.exc",
    "verb.exc",
)
OPTIONAL_FILES = ("cntlist.rev",)
# WordNet 3.0 lexicographer files: number, name, syntactic category (1 noun, 2 verb, 3 adj, 4 adv).
LEXNAMES = (
    ("adj.all", 3),
    ("adj.pert", 3),
    ("adv.all", 4),
    ("noun.Tops", 1),
    ("noun.act", 1),
    ("noun.animal", 1),
    ("noun.artifact", 1),
    ("noun.attribute", 1),
    ("noun.body", 1),
    ("noun.cognition", 1),
    ("noun.communication", 1),
    ("noun.event", 1),
    ("noun.feeling", 1),
    ("noun.food", 1),
    ("noun.group", 1),
    ("noun.location", 1),
    ("noun.motive", 1),
    ("noun.object", 1),
    ("noun.person", 1),
    ("noun.phenomenon", 1),
    ("noun.plant", 1),
    ("noun.possession", 1),
    ("noun.process", 1),
    ("noun.quantity", 1),
    ("noun.relation", 1),
    ("noun.shape", 1),
    ("noun.state", 1),
    ("noun.substance", 1),
    ("noun.time", 1),
    ("verb.body", 2),
    ("verb.change", 2),
    ("verb.cognition", 2),
    ("verb.communication", 2),
    ("verb.competition", 2),
    ("verb.consumption", 2),
    ("verb.contact", 2),
    ("verb.creation", 2),
    ("verb.emotion", 2),
    ("verb.motion", 2),
    ("verb.perception", 2),
    ("verb.possession", 2),
    ("verb.social", 2),
    ("verb.stative", 2),
    ("verb.weather", 2),
    ("adj.ppl", 3),
)


class WordNetMissingError(FileNotFoundError):
    pass


def cache_dir() -> Path:
    """rpbench's cache folder: ``$RPBENCH_CACHE`` or ``~/.cache/rpbench``."""
    return Path(os.environ.get("RPBENCH_CACHE") or Path.home() / ".cache" / "rpbench")


def system_wordnet_dir() -> Path:
    """Where the WordNet database is installed: ``$WNSEARCHDIR`` (WordNet's own variable) or Debian's path."""
    source = Path(os.environ.get("WNSEARCHDIR") or SYSTEM_WORDNET)
    missing = [name for name in DATABASE_FILES if not (source / name).is_file()]
    if missing:
        raise WordNetMissingError(
            f"WordNet 3.0 database not found in {source} (missing {', '.join(missing)}); METEOR needs it. "
            "Install it with `apt-get install wordnet-base`, or set WNSEARCHDIR to a folder holding the "
            "WordNet 3.0 dict files."
        )
    return source


def lexnames_text() -> str:
    return "".join(f"{number:02d}\t{name}\t{category}\n" for number, (name, category) in enumerate(LEXNAMES))


def wordnet_corpus_dir() -> Path:
    """``<cache>/nltk_data/corpora/wordnet``, built from the system database on first use."""
    root = cache_dir() / "nltk_data"
    target = root / "corpora" / "wordnet"
    if not (target / "lexnames").is_file():
        _build(system_wordnet_dir(), target)
    if str(root) not in nltk.data.path:
        nltk.data.path.append(str(root))
    return target


def _build(source: Path, target: Path) -> None:
    """Copy the database files (~28 MB) next to a generated ``lexnames``; atomic so ranks may race.

    Copies, not links: NLTK refuses symlinked or hard-linked corpus files.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".wordnet-", dir=target.parent))
    for name in DATABASE_FILES + OPTIONAL_FILES:
        if not (source / name).is_file():
            continue
        shutil.copyfile(source / name, staging / name)
    (staging / "lexnames").write_text(lexnames_text(), encoding="utf-8")
    staging.chmod(0o755)
    try:
        staging.rename(target)
    except OSError:  # another process built it first
        shutil.rmtree(staging, ignore_errors=True)
        if not (target / "lexnames").is_file():
            raise


class WordNet30Reader(WordNetCorpusReader):
    """NLTK's WordNet reader for a WordNet 3.0 database, without the OMW version mapping."""

    def map_wn(self, version: str = "wordnet") -> None:
        return None


@functools.lru_cache(maxsize=1)
def load_wordnet() -> WordNet30Reader:
    """The English WordNet 3.0 reader (read once per process)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The multilingual functions are not available")
        return WordNet30Reader(str(wordnet_corpus_dir()), None)
