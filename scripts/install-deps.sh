#!/usr/bin/env bash
# Installs what ottr's build and tests need and is missing; safe to run again (it then does
# nothing). Debian 12 packages through apt-get (with sudo when not root), and the pinned npm
# package onnxruntime-node for the ONNX Runtime golden tests (tests/golden/package-lock.json,
# installed into tests/golden/node_modules with --ignore-scripts: its CPU binary ships in the
# package, the install script only fetches optional GPU binaries).
#
#   scripts/install-deps.sh            everything
#   scripts/install-deps.sh --no-npm   Debian packages only
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

want_npm=1
for arg in "$@"; do
  case "$arg" in
    --no-npm) want_npm=0 ;;
    *) echo "install-deps.sh: unknown argument '$arg'" >&2; exit 2 ;;
  esac
done

# The dependency list of shared/DESIGN.md, the toolchain, the fuzzer's clang runtime and what
# models/make_models.py needs (Debian's python3-onnx and python3-numpy).
packages=(
  build-essential cmake ninja-build g++ make pkg-config
  libonnx-dev libprotobuf-dev protobuf-compiler libabsl-dev zlib1g-dev
  libgtest-dev libgmock-dev
  dataset-fashion-mnist
  clang libclang-rt-14-dev
  python3 python3-onnx python3-numpy
)
# Node.js and npm for the ONNX Runtime goldens: only when missing (a machine may carry another
# distribution of Node.js, whose npm must not be replaced by Debian's).
command -v node >/dev/null 2>&1 || packages+=(nodejs)
command -v npm >/dev/null 2>&1 || packages+=(npm)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  sudo=()
  if [[ $(id -u) -ne 0 ]]; then sudo=(sudo); fi
  echo "install-deps.sh: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "install-deps.sh: Debian packages present"
fi

if ((want_npm)); then
  golden=tests/golden
  pinned=$(sed -n 's/.*"onnxruntime-node": *"\([^"]*\)".*/\1/p' "$golden/package.json" | head -n1)
  installed=$(node -p "try { require('./$golden/node_modules/onnxruntime-node/package.json').version } catch (e) { '' }" 2>/dev/null || true)
  binding=$(ls "$golden"/node_modules/onnxruntime-node/bin/napi-v*/linux/*/onnxruntime_binding.node 2>/dev/null | head -n1 || true)
  if [[ "$installed" == "$pinned" && -n "$binding" ]]; then
    echo "install-deps.sh: onnxruntime-node $pinned present"
  else
    echo "install-deps.sh: installing onnxruntime-node $pinned into $golden/node_modules"
    (cd "$golden" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
  fi
fi
