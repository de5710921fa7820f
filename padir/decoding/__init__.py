"""PaDIR's decoders, everything translate, evaluation and distillation call: refinement (PaDIR's
iterative refinement: the released decoder's rules, options beyond them), autoregressive (greedy
and beam AR), ctc (CTC over an upsampled decoder: loss, collapse, decoding)."""
