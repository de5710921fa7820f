"""padir.data.grammar: each knob moves the constituents of a hand-made sentence where its
definition says (the expected target written out from the cipher, constituent by constituent),
the corpus is a byte-for-byte function of the seed, and the lengths stay within their bounds."""

import dataclasses
import json

import pytest

from padir.data import corpus as data
from padir.data import grammar as g

NP = g.NounPhrase


def _sentence(gr: g.Grammar) -> g.Clause:
  """the old man sees a dog quickly near the red house because a cat likes the boat."""
  sub = g.Clause(NP("a", None, "cat"), "likes", NP("the", None, "boat"))
  return g.Clause(
    NP("the", "old", "man"),
    "sees",
    NP("a", None, "dog"),
    "quickly",
    (("near", NP("the", "red", "house")),),
    "because",
    sub,
  )


def _grammar(**knobs) -> tuple[g.Grammar, dict]:
  gr = g.make_grammar(g.Knobs(**knobs), seed=5)
  return gr, gr.cipher


def test_the_default_knobs_are_a_word_for_word_cipher():
  gr, c = _grammar()
  src = g.source_words(_sentence(gr))
  assert " ".join(src) == (
    "the old man sees a dog quickly near the red house because a cat likes the boat"
  )
  assert gr.translate(_sentence(gr)) == [c[w] for w in src]
  assert len(set(c.values())) == len(c)  # one-to-one


@pytest.mark.parametrize("order", g.ORDERS)
def test_order_permutes_subject_verb_and_object_in_every_clause(order):
  gr, c = _grammar(order=order)
  main = {"S": [c["the"], c["old"], c["man"]], "V": [c["sees"]], "O": [c["a"], c["dog"]]}
  sub = {"S": [c["a"], c["cat"]], "V": [c["likes"]], "O": [c["the"], c["boat"]]}
  expected = [w for r in order for w in main[r]] + [c["quickly"], c["near"], c["the"], c["red"]]
  expected += [c["house"], c["because"]] + [w for r in order for w in sub[r]]
  assert gr.translate(_sentence(gr)) == expected


@pytest.mark.parametrize(
  "np_order, expected",
  [
    ("det_adj_noun", ["the", "old", "man"]),
    ("det_noun_adj", ["the", "man", "old"]),
    ("mirror", ["man", "old", "the"]),
  ],
)
def test_np_order_orders_determiner_adjective_and_noun(np_order, expected):
  gr, c = _grammar(np_order=np_order)
  assert gr.translate(_sentence(gr))[:3] == [c[w] for w in expected]
  assert gr.noun_phrase(NP("a", None, "dog")) == (
    [c["dog"], c["a"]] if np_order == "mirror" else [c["a"], c["dog"]]
  )


def test_adposition_post_puts_the_adposition_after_its_noun_phrase():
  gr, c = _grammar(adposition="post")
  out = gr.translate(_sentence(gr))
  assert out[7:11] == [c["the"], c["red"], c["house"], c["near"]]


@pytest.mark.parametrize("adverb, position", [("stay", 6), ("front", 0), ("preverb", 3)])
def test_adverb_moves_to_its_place(adverb, position):
  gr, c = _grammar(adverb=adverb)
  out = gr.translate(_sentence(gr))
  assert out.count(c["quickly"]) == 1 and out.index(c["quickly"]) == position
  rest = [w for w in out if w != c["quickly"]]
  assert rest == [c[w] for w in g.source_words(_sentence(gr)) if w != "quickly"]


def test_clause_front_moves_the_subordinate_clause_before_the_main_clause():
  gr, c = _grammar(clause="front")
  words = "because a cat likes the boat the old man sees a dog quickly near the red house"
  assert gr.translate(_sentence(gr)) == [c[w] for w in words.split()]


def test_agreement_ends_each_clause_with_its_subjects_class_marker():
  gr, c = _grammar(agreement=True)
  agr = lambda noun: gr.agreement[gr.noun_class[noun]]
  plain = [c[w] for w in g.source_words(_sentence(gr))]
  # The main clause's marker comes after its PP (11 words), before the subordinate clause.
  assert gr.translate(_sentence(gr)) == plain[:11] + [agr("man")] + plain[11:] + [agr("cat")]


def test_fertility_adds_the_particle_after_each_fertile_word():
  gr, c = _grammar(fertility=0.5)
  open_words = [w for cat in ("NOUN", "VERB", "ADJ", "ADV") for w in gr.words[cat]]
  assert len(gr.particle) == round(0.5 * len(open_words))
  assert set(gr.particle) <= set(open_words)
  expected = []
  for w in g.source_words(_sentence(gr)):
    expected += [c[w]] + ([gr.particle[w]] if w in gr.particle else [])
  assert gr.translate(_sentence(gr)) == expected
  assert len(set(c.values()) | set(gr.particle.values())) == len(c) + len(gr.particle)


def test_mirror_reverses_the_whole_target():
  gr, _ = _grammar(order="SOV", adposition="post")
  mirrored = g.make_grammar(dataclasses.replace(gr.knobs, mirror=True), seed=5)
  assert mirrored.translate(_sentence(gr)) == gr.translate(_sentence(gr))[::-1]


def test_lexicon_size_sets_the_open_classes():
  for size in (40, 400):
    gr, _ = _grammar(lexicon_size=size)
    assert sum(len(gr.words[cat]) for cat in ("NOUN", "VERB", "ADJ", "ADV")) == size


@pytest.mark.parametrize("lo, hi", [(5, 9), (30, 40)])
def test_sentences_have_min_to_max_words_and_targets_their_translation(lo, hi):
  gr = g.make_grammar(g.Knobs(min_words=lo, max_words=hi, max_depth=3), seed=1)
  pairs = g.make_pairs(200, 0, gr)
  lengths = [len(s.split()) for s, _ in pairs]
  assert min(lengths) >= lo and max(lengths) <= hi and len(set(lengths)) > 2
  assert all(t.split() == [gr.cipher[w] for w in s.split()] for s, t in pairs)


def test_the_same_seed_gives_the_same_corpus_byte_for_byte(tmp_path):
  sizes = {"train": 200, "valid": 20, "test": 20}
  knobs = g.FAMILY["sov_long"]
  a, b, other = tmp_path / "a", tmp_path / "b", tmp_path / "c"
  g.write_corpus(str(a), sizes, knobs, seed=3)
  g.write_corpus(str(b), sizes, knobs, seed=3)
  g.write_corpus(str(other), sizes, knobs, seed=4)
  for name in ("train.tsv", "valid.tsv", "test.tsv", "manifest.json"):
    assert (a / name).read_bytes() == (b / name).read_bytes()
  assert (a / "train.tsv").read_bytes() != (other / "train.tsv").read_bytes()
  assert len(data.read_split(str(a), "valid", "en", "cx")) == 20  # padir.data.corpus reads it
  manifest = json.loads((a / "manifest.json").read_text())
  assert manifest["counts"] == sizes and 30 <= manifest["source_words"][0]


def test_a_corpus_written_again_beside_its_readers_is_never_seen_part_written(
  tmp_path, monkeypatch
):
  """Two runs of one task that start together both write its missing corpus: each file is put in
  place whole (renamed in), the manifest last, so a reader of the first run's files never opens
  one the second is still writing. Checked at every file the second write puts in place: all
  the corpus's files on disk are then whole (the first write's bytes)."""
  sizes = {"train": 300, "valid": 20, "test": 20}
  out = tmp_path / "task"
  g.write_corpus(str(out), sizes, g.FAMILY["sov"], seed=2)
  names = ("train.tsv", "valid.tsv", "test.tsv", "manifest.json")
  whole = {n: (out / n).read_bytes() for n in names}
  placed, replace = [], g.os.replace

  def checked_replace(src, dst):
    for n in names:
      assert (out / n).read_bytes() == whole[n], f"{n} is part-written while {dst} is placed"
    placed.append(g.os.path.basename(dst))
    replace(src, dst)

  monkeypatch.setattr(g.os, "replace", checked_replace)
  g.write_corpus(str(out), sizes, g.FAMILY["sov"], seed=2)
  assert placed == list(names)  # every file renamed in, the manifest last
  assert {n: (out / n).read_bytes() for n in names} == whole
  assert not [p.name for p in out.iterdir() if p.name not in names]  # no temporary left behind


def test_the_family_has_sov_vso_mirror_and_a_long_task_and_the_cli_writes_one(tmp_path):
  assert {"SOV", "VSO"} <= {k.order for k in g.FAMILY.values()}
  assert any(k.mirror for k in g.FAMILY.values()) and len(g.FAMILY) >= 6
  assert any(k.min_words >= 30 and k.max_words <= 40 for k in g.FAMILY.values())
  out = tmp_path / "vso"
  argv = ["--out", str(out), "--task", "vso", "--train", "5", "--valid", "2", "--test", "2"]
  assert g.main([*argv, "--lexicon-size", "60"]) == 0
  knobs = json.loads((out / "manifest.json").read_text())["knobs"]
  assert knobs["order"] == "VSO" and knobs["lexicon_size"] == 60
  assert g.main(["--out", str(out), "--order", "XYZ"]) == 2
