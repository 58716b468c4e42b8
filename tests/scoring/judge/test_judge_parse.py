"""Judge-reply parsers; the MMRole-Eval score parsers (strict and the authors') are checked on every official
review."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rpbench.data.mmrole.prompts import SCORE_PARSERS, parse_score_pair_as_authors
from rpbench.scoring.judge.parse import parse_score_pair, parse_verdict

REPO_ROOT = Path(__file__).resolve().parents[3]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"

RELEASE = REPO_ROOT / "rpbench" / "resources" / "mmrole_release"  # the bundled subset of the MMRole release
FULL_RELEASE = SHARED_DATA / "mmrole"


@pytest.mark.parametrize(
    ("text", "verdict"),
    [
        ("1", 1),
        ("0", 0),
        (" 1\n", 1),
        ("Score: 1", 1),
        ("score:0", 0),
        ("**0**", 0),
        ("1.", 1),
        ("Verdict: 0", 0),
        ("10", None),
        ("1 because it follows the rule", None),
        ("0 or 1", None),
        ("one", None),
        ("", None),
        ("Score:", None),
        ("2", None),
    ],
)
def test_verdict_is_exactly_zero_or_one(text, verdict):
    assert parse_verdict(text) == verdict


@pytest.mark.parametrize(
    ("text", "pair"),
    [
        ("Both are fine. [Scores]: (8, 10)", (8.0, 10.0)),
        ("A rambles. [Scores]: (6.5, 9)\nThanks.", (6.5, 9.0)),
        ("[Scores]: (Model A: 7, Model B: 9)", (7.0, 9.0)),
        ("No scores given.", None),
        ("[Scores]: (8, 10) ... [Scores]: (9, 10)", None),  # ambiguous
        ("[Scores]: (8)", None),
        ("[Scores]: (0, 10)", None),  # outside 1..10
        ("[Scores]: (8, 11)", None),
        ("[Scores]: eight, ten", None),
    ],
)
def test_score_pair_parsing(text, pair):
    assert parse_score_pair(text) == pair


@pytest.mark.parametrize(
    ("text", "authors", "strict"),
    [
        # the authors' get_review_score (eval/RM_review.py) reads the first line after the marker without its
        # parentheses, drops a label before a colon, and checks no range
        ("Fine. [Scores]: 8, 7", (8.0, 7.0), None),
        ("Fine. [Scores]: A: 8, B: 7", (8.0, 7.0), None),
        ("Fine. [Scores]: (Model A: 8, Model B: 7)", (8.0, 7.0), (8.0, 7.0)),
        ("Fine. [Scores]: (0, 11)", (0.0, 11.0), None),
        ("Fine. [Scores]: (12, 10)", (12.0, 10.0), None),
        ("Fine. [Scores]: (-2, 1e1)", (-2.0, 10.0), None),
        ("Fine. [Scores]: (8, 10", (8.0, 10.0), None),
        ("Fine. [Scores]:\n\n(6.5, 9)\nThanks.", (6.5, 9.0), (6.5, 9.0)),
        # text after the pair on its line makes the second field no number for the authors
        ("Fine. [Scores]: (8, 10) - both good", None, (8.0, 10.0)),
        ("Fine. [Scores]: A: 8 B: 7", None, None),  # no comma: one field
        ("Fine. [Scores]: (8, 9, 10)", None, None),
        ("[Scores]: (8, 10) ... [Scores]: (9, 10)", None, None),  # the marker twice
        ("No scores given.", None, None),
        # no score a/b: the authors' RM_result.py stops on b = 0; nan has no ratio either
        ("Fine. [Scores]: (5, 0)", None, None),
        ("Fine. [Scores]: (nan, 5)", None, None),
    ],
)
def test_score_pair_as_the_authors_read_it(text, authors, strict):
    assert parse_score_pair_as_authors(text) == authors
    assert parse_score_pair(text) == strict
    assert SCORE_PARSERS["authors"](text) == authors and SCORE_PARSERS["strict"](text) == strict


def check_reviews(release: Path) -> int:
    """Parse every review text in a release's reviews folders against its recorded score with each parser
    (the authors' wrote the scores); the count checked."""
    files = sorted(release.glob("in-test_reviews/*/*.json"))
    assert len(files) == 9
    checked = 0
    for path in files:
        for record in json.loads(path.read_text()):
            for metric, review in record["rm_review"].items():
                if "review" in review:
                    for mode, parse in SCORE_PARSERS.items():
                        assert parse(review["review"]) == tuple(review["score"]), (mode, path, record["id"], metric)
                    checked += 1
    return checked


def test_the_bundled_official_reviews_parse_to_their_recorded_scores():
    assert check_reviews(RELEASE) == 9 * 3 * 8  # the subset keeps the texts of 3 records per file


@pytest.mark.skipif(not FULL_RELEASE.is_dir(), reason=f"needs the full MMRole release at {FULL_RELEASE}")
def test_every_official_review_parses_to_its_recorded_score():
    assert check_reviews(FULL_RELEASE) == 9 * 72 * 8
