#!/usr/bin/env bash
# Installs, with apt, whatever cohort needs that this Debian machine lacks. Installs nothing when all is present.
# (python3-torchvision: torch's own conformance suite runs test_SyncBatchNorm_process_group only where it imports.)
set -euo pipefail
packages=(build-essential cmake pkg-config libopenblas-dev libdnnl-dev zlib1g-dev libssl-dev
          libopenmpi-dev openmpi-bin python3-torch dataset-fashion-mnist hyperfine iproute2 clang-format
          libtorch-dev pybind11-dev python3-torchvision
          slurm-wlm munge
          clang libclang-rt-dev chromium fonts-dejavu-core prometheus)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "setup: installing ${missing[*]}"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
