"""The sampling substrate shared by every domain: pure, jittable, keyed by explicit PRNG keys.

  blocks    which sites a step of block dynamics updates; writing their values
  draws     categorical draws by CDF inversion, tempering and top-k / top-p, Gibbs and
            product block updates
  randbits  raw Threefry words: every random number of a step from one array of uint32 words
  mesh      device meshes, chain/batch shardings, multi-process initialisation

Shape letters (suffixes of array names, e.g. x_BN):
  B chains (batch)   N sites of a chain   K sites of a block   C candidate values / block
  configurations     V vocabulary or value range   X any leading batch shape
  R rows of a flattened batch   H hashes (two words each)   W words per chain
"""
