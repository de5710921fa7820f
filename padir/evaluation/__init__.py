"""PaDIR's evaluation: metrics (SacreBLEU, chrF, stutter), translation (a split translated,
validation loss and BLEU during training), curves (training figures and report.md),
stutter_attention (attention statistics of stutter vs other adjacent pairs), latency (latency
and throughput of the decoders)."""
