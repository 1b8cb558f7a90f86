#!/usr/bin/env bash
# Create .venv if missing and install flytune_nb into it (editable, with dev extras).
#
# torch: if the Python that creates the venv already imports a CUDA or ROCm build of torch (e.g. conda's pytorch),
# the venv is made with --system-site-packages and that torch is used as is. Otherwise:
# - on a machine with an NVIDIA GPU (nvidia-smi lists one), PyPI's torch==2.11.0, the CUDA build, which requires
#   Triton 3.6.0: the torch and Triton the GPU results in benchmarks/results were measured with, and the Triton whose
#   launcher layout the launch fast path is verified for. torch 2.13.0's CUDA wheel requires Triton 3.7.1, where
#   every launch would take Triton's slower public path (flytune_nb/_compat/triton.py);
# - elsewhere the CPU build of torch 2.13.0. On Linux x86_64 PyPI's torch==2.13.0 is the CUDA build (~3 GB of
#   nvidia-* wheels, and a Triton of its own that then stands in for the pinned one), so there the CPU build is asked
#   for by name, torch==2.13.0+cpu: from the sources pip is configured with (a local wheel folder or mirror), else
#   from PyTorch's CPU index; only when neither has it does PyPI's build install, with a warning. Elsewhere (macOS,
#   aarch64) PyPI's build is the CPU one. An AMD GPU needs a ROCm build of torch, which this script does not pick:
#   install one into the Python that runs make, and it is reused.
# Force a choice with FLYTUNE_TORCH=system (reuse), FLYTUNE_TORCH=cpu (the CPU build, GPU or not); TORCH_PIN=<req>
# installs exactly that requirement instead.
set -euo pipefail
VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
TORCH_VERSION=2.13.0
TORCH_GPU_VERSION=2.11.0
TORCH_PIN=${TORCH_PIN:-}
TORCH_CPU_INDEX=${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}
# Triton for the CPU path: the interpreter of the version the H200 image runs, so CPU and GPU read the same Triton.
TRITON_PIN=${TRITON_PIN:-triton==3.6.0}

gpu_torch() {
  "$PYTHON" -c 'import sys, torch; sys.exit(0 if (torch.version.cuda or getattr(torch.version, "hip", None)) else 1)' \
    >/dev/null 2>&1
}

mode=${FLYTUNE_TORCH:-auto}
if [ ! -x "$VENV/bin/python" ]; then
  if [ "$mode" = system ] || { [ "$mode" = auto ] && gpu_torch; }; then
    echo "bootstrap: reusing the GPU build of torch importable from $PYTHON (--system-site-packages)"
    "$PYTHON" -m venv --system-site-packages "$VENV"
  else
    "$PYTHON" -m venv "$VENV"
  fi
fi
PIP=("$VENV/bin/python" -m pip install -q --disable-pip-version-check)
install_cpu_torch() {
  if [ "$(uname -s)-$(uname -m)" != Linux-x86_64 ]; then
    "${PIP[@]}" "torch==$TORCH_VERSION"
    return
  fi
  local cpu="torch==$TORCH_VERSION+cpu"
  # the first try is quiet: on a machine with no local copy its "no matching distribution" is expected
  "${PIP[@]}" "$cpu" 2>/dev/null && return
  echo "bootstrap: $cpu is not among pip's configured sources; trying $TORCH_CPU_INDEX"
  "${PIP[@]}" --retries 2 --extra-index-url "$TORCH_CPU_INDEX" "$cpu" && return
  echo "bootstrap: WARNING: could not install $cpu (no local copy, $TORCH_CPU_INDEX unreachable); installing" \
       "torch==$TORCH_VERSION from pip's index, which on Linux x86_64 is the CUDA build (~3 GB) and brings its own" \
       "Triton. Set TORCH_PIN to choose another requirement." >&2
  "${PIP[@]}" "torch==$TORCH_VERSION"
}

if ! "$VENV/bin/python" -c 'import torch' >/dev/null 2>&1; then
  if [ -n "$TORCH_PIN" ]; then
    echo "bootstrap: installing $TORCH_PIN"
    "${PIP[@]}" "$TORCH_PIN"
  elif [ "$mode" != cpu ] && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    echo "bootstrap: an NVIDIA GPU is present: installing torch==$TORCH_GPU_VERSION, PyPI's CUDA build (Triton 3.6.0)"
    "${PIP[@]}" "torch==$TORCH_GPU_VERSION"
  else
    echo "bootstrap: installing the CPU build of torch $TORCH_VERSION"
    install_cpu_torch
  fi
fi
if ! "$VENV/bin/python" -c 'import triton' >/dev/null 2>&1; then
  echo "bootstrap: installing $TRITON_PIN"
  "${PIP[@]}" "$TRITON_PIN"
fi
"${PIP[@]}" -e '.[dev]'
# The sglang extra (kernels/sglang_fused_moe, its tests): sglang itself with --no-deps — its declared dependencies are
# a serving install (torch==2.14.1, sgl-kernel, flashinfer, CUDA wheels) that its MoE code never imports — and the rest
# of the extra resolved as usual. FLYTUNE_SGLANG=0 skips it.
if [ "${FLYTUNE_SGLANG:-1}" != 0 ]; then
  mapfile -t SGLANG_EXTRA < <("$VENV/bin/python" - <<'PY'
try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    from pip._vendor import tomli as tomllib
with open("pyproject.toml", "rb") as f:
    print("\n".join(tomllib.load(f)["project"]["optional-dependencies"]["sglang"]))
PY
  )
  rest=() sglang_pin=""
  for req in "${SGLANG_EXTRA[@]}"; do
    case "$req" in sglang[=\<\>~!]*|sglang) sglang_pin=$req ;; *) rest+=("$req") ;; esac
  done
  echo "bootstrap: installing the sglang extra ($sglang_pin with --no-deps)"
  "${PIP[@]}" "${rest[@]}"
  "${PIP[@]}" --no-deps "$sglang_pin"
fi
# FlyDSL, for the FlyDSL kernels and their tests (make test uses it). Where pip finds no flydsl wheel for this
# platform the FlyDSL kernels are listed as unavailable and their tests skip; FLYTUNE_FLYDSL=0 skips the install.
if [ "${FLYTUNE_FLYDSL:-1}" != 0 ]; then
  "${PIP[@]}" -e '.[flydsl]' || echo "bootstrap: flydsl could not be installed here; the FlyDSL kernels and tests are skipped"
fi
"$VENV/bin/python" -c 'import importlib.metadata as md, torch, triton, flytune_nb
try:
    fly = "flydsl " + md.version("flydsl")
except md.PackageNotFoundError:
    fly = "no flydsl"
print(f"bootstrap: flytune_nb {flytune_nb.__version__}, torch {torch.__version__}, triton {triton.__version__}, {fly}")'
