"""padir.data.synthetic: the corpus is a deterministic function of the seed, every target is the
rule-based translation of its source (checked by an independent left-to-right reading), the
reordering and fertility rules occur, and the synthetic configs size a 3+3 model (the deep /
shallow one at about equal parameters)."""

import json

from configs import (
  padir_synthetic,
  padir_synthetic_ar,
  padir_synthetic_ar_deep_shallow,
  padir_synthetic_deep_shallow,
)
from padir.data import corpus as data
from padir.data import synthetic
from padir.model import transformer as model_lib

SIZES = {"train": 300, "valid": 20, "test": 20}


def test_the_corpus_is_deterministic_and_readable(tmp_path):
  a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
  synthetic.write_corpus(str(a), SIZES, seed=3)
  synthetic.write_corpus(str(b), SIZES, seed=3)
  synthetic.write_corpus(str(c), SIZES, seed=4)
  for split in SIZES:
    assert (a / f"{split}.tsv").read_bytes() == (b / f"{split}.tsv").read_bytes()
    assert (a / f"{split}.tsv").read_bytes() != (c / f"{split}.tsv").read_bytes()
    assert (
      len(data.read_split(str(a), split, "en", "cx")) == SIZES[split]
    )  # padir.data.corpus reads it
  manifest = json.loads((a / "manifest.json").read_text())
  assert manifest["counts"] == SIZES


def test_targets_follow_the_rules(tmp_path):
  """Reading the source left to right: an adjective before a noun swaps with it, a fertile word
  adds its particle, every word is replaced by its cipher; the cipher is one-to-one."""
  manifest = synthetic.write_corpus(str(tmp_path), SIZES, seed=3)
  cipher, particle = manifest["cipher"], manifest["particle"]
  assert len(set(cipher.values()) | set(particle.values())) == len(cipher) + len(particle)
  adjectives, nouns = set(synthetic.ADJ), set(synthetic.NOUN)
  swaps = fertile = 0
  for src, tgt in data.read_split(str(tmp_path), "train", "en", "cx"):
    words, expected = src.split(), []
    assert 5 <= len(words) <= 11
    for j, w in enumerate(words):
      if w in nouns and j > 0 and words[j - 1] in adjectives:
        expected.insert(len(expected) - 1, cipher[w])  # the noun goes before its adjective
        swaps += 1
      else:
        expected.append(cipher[w])
      if w in particle:
        expected.append(particle[w])
        fertile += 1
    assert tgt.split() == expected, src
  # Each NP has an adjective with probability 1/2 (2.5 NPs per sentence); 5 of 18 verbs and
  # prepositions are fertile. Expected counts over 300 sentences: ~375 swaps, ~100 particles.
  assert 300 < swaps < 450 and 60 < fertile < 150


def test_the_synthetic_configs_size_the_models():
  c = padir_synthetic.get_config()
  assert (c.model.num_encoder_layers, c.model.num_decoder_layers) == (3, 3)
  counts = {}
  for name, module in (
    ("ar", padir_synthetic_ar),
    ("deep_shallow", padir_synthetic_ar_deep_shallow),
  ):
    cfg = model_lib.ModelConfig.from_run_config(module.get_config(), c.data.vocab_size)
    counts[name] = model_lib.abstract_param_count(cfg)
  assert padir_synthetic_ar_deep_shallow.get_config().model.num_decoder_layers == 1
  assert abs(counts["deep_shallow"] / counts["ar"] - 1) < 0.05, counts


def test_the_deep_shallow_padir_config_matches_the_3_plus_3_padir_in_parameters():
  """6 + 1 layers against 3 + 3, both PaDIR (positional attention in the decoder): within 5%,
  and the closed form of the config header (encoder layer 4 D^2 + 2 D F, decoder layer
  12 D^2 + 2 D F, biases and norms aside) says the same."""
  c = padir_synthetic.get_config()
  counts = {}
  for name, module in (("base", padir_synthetic), ("deep_shallow", padir_synthetic_deep_shallow)):
    config = module.get_config()
    assert config.model.decoder == "nar"
    cfg = model_lib.ModelConfig.from_run_config(config, c.data.vocab_size)
    counts[name] = model_lib.abstract_param_count(cfg)
  m = padir_synthetic_deep_shallow.get_config().model
  assert (m.num_encoder_layers, m.num_decoder_layers) == (6, 1)
  assert abs(counts["deep_shallow"] / counts["base"] - 1) < 0.05, counts
  D, F = c.model.d_model, c.model.d_ff
  enc, dec = 4 * D * D + 2 * D * F, 12 * D * D + 2 * D * F
  closed = (6 * enc + dec) - (3 * enc + 3 * dec)
  assert abs((counts["deep_shallow"] - counts["base"]) - closed) < 0.01 * counts["base"], counts


def _reorder_expected(src: str, m: dict) -> tuple[list[str], int]:
  """The reordering grammar's target, read from the manifest's tables (an independent reading:
  the source split into subject NP, verb, object NP, PP by word category), and the distance in
  target words from the subject's noun to the agreement marker (the last word)."""
  words, cats = src.split(), {w: c for c, ws in m["words"].items() for w in ws}
  cipher, particle, k = m["cipher"], m["particle"], m["noun_class"]
  verb_at = next(i for i, w in enumerate(words) if cats[w] == "VERB")
  prep_at = next((i for i, w in enumerate(words) if cats[w] == "PREP"), len(words))
  subj, verb = words[:verb_at], words[verb_at]
  obj, pp = words[verb_at + 1 : prep_at], words[prep_at:]

  def noun_phrase(np_):
    return [cipher[f"{np_[0]}#{k[np_[-1]]}"], cipher[np_[-1]]] + [cipher[w] for w in np_[1:-1]]

  def word(w):
    return [cipher[w]] + ([particle[w]] if w in particle else [])

  out = noun_phrase(pp[1:]) + word(pp[0]) if pp else []
  swap = verb in m["swap_verbs"]
  subject_at = len(out) + (len(obj) if swap else 0) + 1
  a, b = (obj, subj) if swap else (subj, obj)
  out += noun_phrase(a) + noun_phrase(b) + word(verb) + [m["agreement"][k[subj[-1]]]]
  return out, len(out) - 1 - subject_at


def test_the_reordering_grammar_moves_words_far_and_agrees_at_a_distance(tmp_path):
  small = synthetic.write_corpus(str(tmp_path / "s"), SIZES, seed=3, grammar="reorder")
  large = synthetic.write_corpus(
    str(tmp_path / "l"), SIZES, seed=3, grammar="reorder", lexicon_scale=4
  )
  synthetic.write_corpus(str(tmp_path / "s2"), SIZES, seed=3, grammar="reorder")
  assert (tmp_path / "s" / "train.tsv").read_bytes() == (tmp_path / "s2" / "train.tsv").read_bytes()
  # As large a lexicon as the cipher grammar's (66 source words), and one 3.4x larger.
  assert small["source_words"] == 66 and large["source_words"] == 222
  for m, d in ((small, "s"), (large, "l")):
    tables = (m["cipher"], m["particle"], dict(enumerate(m["agreement"])))
    ciphers = [c for t in tables for c in t.values()]
    assert len(set(ciphers)) == len(ciphers)  # one-to-one
    swapped = pp = far = 0
    for src, tgt in data.read_split(str(tmp_path / d), "train", "en", "cx"):
      expected, distance = _reorder_expected(src, m)
      assert tgt.split() == expected, src
      words = src.split()
      swapped += any(w in m["swap_verbs"] for w in words)
      pp += any(w in m["words"]["PREP"] for w in words)
      far += distance >= 4
    # Over 300 sentences: half the verbs swap the arguments, half the sentences move a PP to
    # the front; in about half the agreement marker is 4+ words from its subject's noun.
    assert 100 < swapped < 200 and 100 < pp < 200 and far > 120, (swapped, pp, far)
