#!/usr/bin/env bash
# Wheels for the GPU machines: Python 3.12 manylinux x86-64 wheels of exactly the packages their
# preinstalled image (jax CUDA, flax, optax, orbax, chex, numpy, scipy, matplotlib, tqdm,
# safetensors, transformers, huggingface-hub, sentencepiece, sacrebleu, torch, pytest and what
# those pull in) lacks, for importing every module of this project and running its tests there.
# Run on a machine that reaches PyPI; the GPU machine reaches none.
#
#   tools/gpu_wheels.sh [DIR]          # default DIR: .gpu_wheels (ignored by git)
#   PY_VERSION=3.11 tools/gpu_wheels.sh /tmp/w311   # the 3.11 builds (tools/check_gpu_imports.py)
#
# then on the GPU machine, from the repository root:
#   pip install --no-index --no-deps --target .gpu_site .gpu_wheels/*.whl
#   export PYTHONPATH=$PWD/.gpu_site:$PWD
#
# The list: the project's own needs (first line) and their Requires-Dist closure minus the image
# (checked by tools/check_gpu_imports.py, which imports every project module against the image's
# packages plus these wheels). pyarrow (tensorflow-datasets' Requires-Dist, a 40 MB wheel) is
# left out: tensorflow-datasets imports it lazily, only to write parquet/arrow files.
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=${1:-.gpu_wheels}
PY_VERSION=${PY_VERSION:-3.12}
PY_TAG=cp${PY_VERSION/./}
PACKAGES=(
  ml-collections==1.1.0 grain==0.2.18 array-record==0.8.6 tensorflow-datasets==4.9.10
  tensorboardX==2.6.5 thrml==0.1.4 gguf==0.19.0
  # grain: cloudpickle, portpicker; tensorflow-datasets: dm-tree, immutabledict, promise (six),
  # simple-parsing (docstring-parser), tensorflow-metadata (googleapis-common-protos),
  # termcolor, toml, wrapt; thrml: equinox, jaxtyping (wadler-lindig)
  cloudpickle==3.1.2 portpicker==1.6.0 dm-tree==0.1.10 immutabledict==4.3.1
  simple-parsing==0.1.9 docstring-parser==0.18.0 tensorflow-metadata==1.21.0
  googleapis-common-protos==1.76.0 termcolor==3.3.0 toml==0.10.2 wrapt==2.5.2
  equinox==0.13.8 jaxtyping==0.3.11 wadler-lindig==0.1.8 six==1.17.0
)
# Published as source only (pure Python): built here into py3-none-any wheels.
SOURCE_ONLY=(pysword==0.2.8 promise==2.3)
mkdir -p "$DEST"
pip wheel --quiet --no-deps -w "$DEST" "${SOURCE_ONLY[@]}"
pip download --quiet --only-binary=:all: --no-deps --python-version "$PY_VERSION" \
  --implementation cp --abi "$PY_TAG" --abi abi3 --abi none \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform any -d "$DEST" "${PACKAGES[@]}"
# Every wheel must be pure Python or built for this CPython on manylinux x86-64.
python3 - "$DEST" "$PY_TAG" <<'PY'
import pathlib, sys
dest, py = pathlib.Path(sys.argv[1]), sys.argv[2]
total, bad = 0, []
for w in sorted(dest.glob("*.whl")):
  pyt, abi, plat = w.name[:-4].split("-")[-3:]
  ok = ((any(t.startswith("py3") for t in pyt.split(".")) or py in pyt.split("."))
        and abi in (py, "abi3", "none")
        and (plat == "any" or all(p.startswith("manylinux") and p.endswith("x86_64")
                                  for p in plat.split("."))))
  size = w.stat().st_size
  total += size
  print(f"{size / 1e6:7.2f} MB  {'ok ' if ok else 'BAD'}  {w.name}")
  if not ok:
    bad.append(w.name)
print(f"{total / 1e6:7.2f} MB  total, {len(list(dest.glob('*.whl')))} wheels in {dest}")
if bad:
  sys.exit(f"wheels with a wrong tag: {bad}")
PY
echo "On the GPU machine, from the repository root:"
echo "  pip install --no-index --no-deps --target .gpu_site $DEST/*.whl" \
  "&& export PYTHONPATH=\$PWD/.gpu_site:\$PWD"
