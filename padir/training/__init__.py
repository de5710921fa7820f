"""PaDIR's training: loop (`fit(config, rd)`: the loop, checkpoints, resume; `validate`), optim
(schedule, AdaFactor), sharding (logical axis rules / FSDP on the gmlm.core.mesh mesh),
warm_start (initialising from a trained run), distill (sequence-level distillation from the AR
baseline)."""
