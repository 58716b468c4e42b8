"""Offline WordNet 3.0 for METEOR (no download at run time), looked for in this order:

1. ``$RPBENCH_WORDNET``: a folder holding the WordNet 3.0 database (Debian's dict files, or nltk's
   ``corpora/wordnet`` folder); set but wrong is an error, not a fall-through.
2. nltk's own data path (``nltk.data.path``, e.g. ``~/nltk_data``): ``corpora/wordnet`` or
   ``corpora/wordnet.zip``, what ``python -c "import nltk; nltk.download('wordnet')"`` installs.
3. The system's WordNet: ``$WNSEARCHDIR`` (WordNet's own variable), else ``/usr/share/wordnet``, where
   Debian/Ubuntu's ``wordnet-base`` package installs it.

When none has it, ``WordNetMissingError`` says how to get it (the evaluation then reports METEOR as
missing). NLTK's reader also wants ``lexnames``, which Debian does not ship; its content is the fixed
list of the 45 WordNet lexicographer files, so a database without it is copied once into
``$RPBENCH_CACHE/wordnet/<key>`` (default ``~/.cache/rpbench``) next to a generated ``lexnames``.

Debian also lacks ``index.sense`` (sense key -> synset), which NLTK's reader reads at start-up only to map
other WordNet versions onto 3.0 for the multilingual OMW data; this database *is* 3.0, so the reader
below skips that mapping. Sense-key look-ups (``lemma_from_key``) are therefore unavailable; use
``load_wordnet()`` rather than the global ``nltk.corpus.wordnet`` (METEOR here does). Every folder read
is added to ``nltk.data.path``, which NLTK requires of every corpus root it opens.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # nltk is imported when WordNet is looked for: a run without METEOR never loads it
    import nltk
    from nltk.corpus.reader.wordnet import WordNetCorpusReader

SETTING = "RPBENCH_WORDNET"
SYSTEM_WORDNET = Path("/usr/share/wordnet")
HOW_TO_GET = (
    "Get WordNet 3.0 in one of these ways: `python -c \"import nltk; nltk.download('wordnet')\"` (any system; "
    "into nltk's data path), `apt-get install wordnet-base` (Debian/Ubuntu), or set RPBENCH_WORDNET to a folder "
    "holding the WordNet 3.0 database files."
)
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
    """No WordNet 3.0 in any of the places searched; the message says how to get it."""


def cache_dir() -> Path:
    """rpbench's cache folder: ``$RPBENCH_CACHE`` or ``~/.cache/rpbench``."""
    return Path(os.environ.get("RPBENCH_CACHE") or Path.home() / ".cache" / "rpbench")


def find_wordnet() -> tuple[str | nltk.data.PathPointer, str]:
    """(corpus root for NLTK's reader, the place it was found: ``RPBENCH_WORDNET``, ``nltk``, ``system``),
    searching in the order of the module docstring."""
    import nltk

    explicit = os.environ.get(SETTING)
    if explicit:
        missing = missing_files(Path(explicit))
        if missing:
            raise FileNotFoundError(
                f"{SETTING}={explicit}: no WordNet 3.0 database there (missing {', '.join(missing)}). {HOW_TO_GET}"
            )
        return readable_root(Path(explicit)), SETTING
    for resource in ("corpora/wordnet", "corpora/wordnet.zip/wordnet/"):  # as nltk.corpus.wordnet looks
        try:
            return nltk.data.find(resource), "nltk"
        except LookupError:
            pass
    system = Path(os.environ.get("WNSEARCHDIR") or SYSTEM_WORDNET)
    if not missing_files(system):
        return readable_root(system), "system"
    raise WordNetMissingError(
        f"WordNet 3.0 not found ({SETTING} is not set, nltk's data path has no corpora/wordnet, and the "
        f"system's WordNet folder, $WNSEARCHDIR or {SYSTEM_WORDNET}, has no database); METEOR needs it. {HOW_TO_GET}"
    )


def missing_files(folder: Path) -> list[str]:
    return [name for name in DATABASE_FILES if not (folder / name).is_file()]


def lexnames_text() -> str:
    return "".join(f"{number:02d}\t{name}\t{category}\n" for number, (name, category) in enumerate(LEXNAMES))


def readable_root(folder: Path) -> str:
    """``folder`` when it has ``lexnames`` (nltk's layout), else its copy with one in the cache; either way
    registered on ``nltk.data.path``."""
    import nltk

    if (folder / "lexnames").is_file():
        root = folder.resolve()
    else:
        root = cache_dir() / "wordnet" / hashlib.sha256(str(folder.resolve()).encode()).hexdigest()[:12]
        if not (root / "lexnames").is_file():
            _build(folder, root)
    if str(root.parent) not in nltk.data.path:
        nltk.data.path.append(str(root.parent))
    return str(root)


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


def wordnet_reader(root: str | nltk.data.PathPointer) -> WordNetCorpusReader:
    """NLTK's WordNet reader for the WordNet 3.0 database at ``root``, without the OMW version mapping."""
    from nltk.corpus.reader.wordnet import WordNetCorpusReader

    class WordNet30Reader(WordNetCorpusReader):
        def map_wn(self, version: str = "wordnet") -> None:
            return None

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The multilingual functions are not available")
        return WordNet30Reader(root, None)


@functools.lru_cache(maxsize=1)
def load_wordnet() -> WordNetCorpusReader:
    """The English WordNet 3.0 reader (read once per process)."""
    return wordnet_reader(find_wordnet()[0])
