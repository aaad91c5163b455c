#!/usr/bin/env bash
# Installs everything Stoker needs to build and test on Debian 12, idempotently: what is
# already there is left alone, so running it again costs a few seconds. Needs root (or
# sudo) only when an apt package is missing.
#
#   tools/setup.sh          # check and install
#   tools/setup.sh --check  # only report what is missing; exit 1 if anything is
set -euo pipefail

APT_PACKAGES=(
  bazel-bootstrap      # Bazel 4.2.3, run offline (third_party/ holds its local rules)
  g++ pkg-config
  libopenmpi-dev openmpi-bin
  libabsl-dev          # 20220623: flags, status, strings, time, synchronization
  libgtest-dev
  libturbojpeg0-dev libjpeg62-turbo-dev libpng-dev
  nlohmann-json3-dev   # JSON of torch.export archives (models brought from Python)
  clang clang-format   # tools/check_thread_safety.sh and tools/check_format.sh
)
# torch is pinned to the GPU hosts' version so that binaries built here run there.
PIP_PACKAGES=(
  "torch==2.11.0"
  "torchvision==0.26.0"
  numpy pillow
  "nvidia-nvjpeg==13.3.2.43"  # nvjpeg.h for the trainer's GPU JPEG decode (libnvjpeg is dlopen'ed)
  safetensors          # --init_weights reads safetensors files; its tests write them
  tensorboard scikit-learn matplotlib  # trainer tests: event files, the digits dataset, plots
)

check_only=0
[[ "${1:-}" == "--check" ]] && check_only=1

python="${STOKER_PYTHON:-$(command -v python3 || true)}"
if [[ -z "$python" ]]; then
  echo "setup: no python3 on PATH; install Python 3 (3.10 or newer) first" >&2
  exit 1
fi

missing_apt=()
for pkg in "${APT_PACKAGES[@]}"; do
  [[ "$pkg" == \#* ]] && continue
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing_apt+=("$pkg")
done

missing_pip=()
for spec in "${PIP_PACKAGES[@]}"; do
  name="${spec%%==*}"
  want="${spec#*==}"; [[ "$want" == "$spec" ]] && want=""
  have=$("$python" -c "import importlib.metadata as m; print(m.version('$name'))" 2>/dev/null || true)
  if [[ -z "$have" ]] || { [[ -n "$want" ]] && [[ "${have%%+*}" != "$want" ]]; }; then
    missing_pip+=("$spec")
  fi
done

if (( ${#missing_apt[@]} == 0 && ${#missing_pip[@]} == 0 )); then
  [[ "${STOKER_SETUP_QUIET:-0}" == 1 ]] || echo "setup: all dependencies present"
  exit 0
fi
if (( check_only )); then
  echo "setup: missing apt packages: ${missing_apt[*]:-none}; pip packages: ${missing_pip[*]:-none}" >&2
  exit 1
fi

if (( ${#missing_apt[@]} > 0 )); then
  echo "setup: installing apt packages: ${missing_apt[*]}"
  sudo=""
  [[ $(id -u) -ne 0 ]] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing_apt[@]}"
fi
if (( ${#missing_pip[@]} > 0 )); then
  echo "setup: installing pip packages: ${missing_pip[*]} (torch brings the CUDA 13 runtime: a few GB)"
  "$python" -m pip install --quiet --disable-pip-version-check "${missing_pip[@]}"
fi
echo "setup: done"
