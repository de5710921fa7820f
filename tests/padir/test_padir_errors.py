"""The error analysis of translations (padir.evaluation.errors) on hand-made sentences whose
classes are known: each counted as the module says, the shares adding up to one."""

import pytest

from padir.evaluation import errors

REFS = [
  "a b c zo",  # exact
  "a b c zo",  # reordered
  "a b c zo",  # a word dropped: shorter, lexical
  "a b c zo",  # a word replaced by a non-word (two pieces fused)
  "d e zi f g zo",  # two clauses; the markers swapped: reordered, agreement wrong
]
HYPS = ["a b c zo", "b a c zo", "a c zo", "a bc c zo", "d e zo f g zi"]
LEXICON = {"a", "b", "c", "d", "e", "f", "g", "zo", "zi"}


def test_each_class_and_count_is_the_hand_made_one():
  got = errors.analyse(HYPS, REFS, LEXICON, markers={"zo", "zi"})
  assert got.sentences == 5
  assert (got.exact, got.reordered, got.lexical) == (1 / 5, 2 / 5, 2 / 5)
  assert got.exact + got.reordered + got.lexical == pytest.approx(1.0)
  assert got.nonword == 1 / 5  # "bc"
  assert (got.shorter, got.longer) == (1 / 5, 0.0)
  # dropped: "b" (sentence 3), "b" (sentence 4); inserted: "bc"
  assert (got.dropped, got.inserted) == (2 / 5, 1 / 5)
  assert got.agreement == 1 / 5  # only the last: its marker sequence is zo, zi, not zi, zo
  assert len(got.row()) == len(errors.HEADER)


def test_without_lexicon_or_markers_those_columns_are_not_counted():
  got = errors.analyse(HYPS, REFS)
  assert got.nonword == 0.0 and got.agreement is None
  assert got.row()[-1] == "-"


def test_bad_input_is_one_clear_error():
  with pytest.raises(ValueError, match="2 hypotheses for 1 references"):
    errors.analyse(["a", "b"], ["a"])
  with pytest.raises(ValueError, match="no sentences"):
    errors.analyse([], [])


def test_on_real_text_case_and_punctuation_make_no_non_word_and_the_references_are_the_floor():
  """A word is its letters and digits, lowercased: "Dios:" and "luz." are words of a lexicon
  holding "dios" and "Luz,", a lone "¿" is no word, and "lúz" (a piece replaced) is a non-word;
  a reference with a name the training targets lack makes the references' own floor."""
  lexicon = ["Y", "dijo", "dios", "Sea", "la", "Luz,"]
  refs = ["Y dijo Dios: Sea la luz.", "Y dijo Dios: Sea la luz.", "Y dijo Moisés: ¿Sea la luz?"]
  hyps = ["Y dijo Dios: Sea la luz.", "Y dijo Dios: Sea la lúz.", "Y dijo Dios: ¿ Sea la luz?"]
  assert errors.analyse(hyps, refs, lexicon).nonword == 1 / 3  # "lúz." only
  assert errors.analyse(refs, refs, lexicon).nonword == 1 / 3  # "Moisés:"
  assert [errors.word_form(w) for w in ("¿Sea", "luz?", "¿", "Ben-hadad,")] == [
    "sea",
    "luz",
    "",
    "ben-hadad",
  ]
  assert errors.analyse(HYPS, REFS, LEXICON).nonword == 1 / 5  # the family's words unchanged
