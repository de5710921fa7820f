#!/usr/bin/env bash
# One accelerator lease, start to end: install the travelling wheels, record the device, run the
# suite under its budget, then a real PaDIR training run (train.py, the synthetic cipher task,
# the model at the paper's width and depth in bf16) whose metrics.jsonl logs its MFU as every
# training run does. Everything lands in OUT (default: $OUT, else runs/accelerator).
#
#   tools/gpu_wheels.sh                               # once, where PyPI is reachable
#   tools/accelerator_run.sh [BUDGET_S] [TRAIN_S]     # on the GPU machine, repository root
#
# BUDGET_S (default 300) bounds the suite (benchmarks/accelerator.py --budget); TRAIN_S
# (default 180) bounds the training run (killed at that limit: its logged steps stay).
# SECTIONS (env) picks the suite's sections (default: the default run; padir_variants is extra); SUITE_XLA_FLAGS (env) is XLA_FLAGS
# for the suite alone, e.g. --xla_gpu_enable_command_buffer= so the profile lists HLO ops
# rather than CUDA graphs.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/accelerator}
BUDGET=${1:-300}
TRAIN_S=${2:-180}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if [ -d .gpu_wheels ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/gpu_site .gpu_wheels/*.whl || exit 1
  export PYTHONPATH=/tmp/gpu_site:$PWD
fi
{
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm \
    --format=csv 2>&1
  python3 -c "import jax, flax, optax, sys; print(sys.version.split()[0], 'jax', jax.__version__,
'flax', flax.__version__, 'optax', optax.__version__, jax.devices())"
} | tee "$OUT/device.txt"
t0=$(date +%s)
SECTIONS=${SECTIONS:-tests,matmul_peak,mlm_forward,glauber,padir,ising}
XLA_FLAGS=${SUITE_XLA_FLAGS:-${XLA_FLAGS:-}} python3 benchmarks/accelerator.py --out "$OUT" \
  --budget "$BUDGET" --sections "$SECTIONS" 2>&1 | tee "$OUT/suite.log"
echo "suite: $(($(date +%s) - t0)) s wall" | tee -a "$OUT/suite.log"
# The training run: paper width and depth (6+6 layers, d 512, FFN 2,048, 8 heads), batch 256,
# bf16 compute, on the synthetic task generated here (seconds); no evaluation inside the window.
# vocab_size 160: the image's SentencePiece (0.2.2) finds fewer pieces in this corpus than
# 0.2.3 does and refuses the config's 176.
python3 -m padir.data.synthetic --out /tmp/synthetic > /dev/null 2>&1
timeout "$TRAIN_S" python3 train.py --config configs/padir_synthetic_ctc.py --workdir /tmp/train \
  --config.data.corpus_dir=/tmp/synthetic --config.data.vocab_size=160 --config.model.num_encoder_layers=6 \
  --config.model.num_decoder_layers=6 --config.model.d_model=512 --config.model.d_ff=2048 \
  --config.model.num_heads=8 --config.model.dtype=bfloat16 --config.train.batch_size=256 \
  --config.train.num_train_steps=2000 --config.train.log_every=20 \
  --config.train.eval_every=100000 --config.train.checkpoint_every=100000 \
  --config.train.progress_bar=false > "$OUT/train.log" 2>&1
echo "train.py exit $? after $(($(date +%s) - t0)) s wall in all" | tee -a "$OUT/train.log"
cp /tmp/train/metrics.jsonl "$OUT/train_metrics.jsonl" 2>/dev/null
python3 - "$OUT/train_metrics.jsonl" <<'EOF' 2>&1 | tee -a "$OUT/train.log"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"mfu"' in l]
for r in rows:
  print(f"step {r['step']:5d} loss {r['train_loss']:.3f} {r['step_seconds'] * 1e3:7.1f} ms/step "
        f"{r['target_tokens_per_s']:9.0f} target tok/s  MFU {r['mfu']:.3f} "
        f"(peak {r['peak_flops'] / 1e12:.0f} TFLOP/s)")
EOF
