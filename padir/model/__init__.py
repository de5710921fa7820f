"""PaDIR's model: transformer (the flax.nnx encoder-decoder, its length head, the AR KV cache),
losses (the noising rule, the multi-stage and AR losses), restore (a trained run's model for
other code)."""
