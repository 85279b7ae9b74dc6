#!/usr/bin/env bash
# Builds a plugin-enabled `qemu-x86_64` of a current QEMU release from Debian's source package
# (trixie's by default: QEMU 10.0), for the qemu backend, into rtit's cache (`rtit build-qemu`
# runs this same script). Distributions'
# own `qemu-user` is often built static with plugins disabled (Debian 13's is), so the backend
# cannot use it. Prints the binary's path last; `rtit record` finds it there by itself.
#
# Needs root (or sudo) for apt: it adds a deb-src line for the suite and installs the build
# dependencies (ninja-build, libglib2.0-dev, pkgconf, python3-venv, flex, bison, dpkg-dev).
# meson and pycotap come from PyPI into a virtual environment of the build's own.
#
#   scripts/build-qemu.sh            # QEMU of Debian trixie (or: rtit build-qemu)
#   RTIT_QEMU_SUITE=sid scripts/build-qemu.sh
#
# A second run with the binary already built prints its path and does nothing else.
set -euo pipefail

suite=${RTIT_QEMU_SUITE:-trixie}
cache=${RTIT_QEMU_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rtit/qemu}
work=$cache/build-$suite
jobs=${RTIT_QEMU_JOBS:-$(nproc)}

say() { echo "build-qemu: $*" >&2; }
as_root() {
  if [[ $(id -u) -eq 0 ]]; then "$@"; else sudo "$@"; fi
}

# Already built for this suite? (The marker names the version built.)
if [[ -f $cache/$suite.version ]]; then
  built=$cache/$(cat "$cache/$suite.version")/qemu-x86_64
  if [[ -x $built ]]; then
    echo "$built"
    exit 0
  fi
fi

list=/etc/apt/sources.list.d/rtit-qemu-source.sources
if [[ ! -f $list ]]; then
  say "adding Debian $suite's source packages to apt ($list)"
  printf 'Types: deb-src\nURIs: http://deb.debian.org/debian\nSuites: %s\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
    "$suite" | as_root tee "$list" >/dev/null
fi
say "apt-get update, and the build's dependencies"
as_root apt-get update -qq
as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
  ninja-build libglib2.0-dev pkgconf python3-venv flex bison dpkg-dev gcc make >/dev/null

rm -rf "$work"
mkdir -p "$work"
cd "$work"
say "fetching qemu's source package from $suite"
apt-get source --download-only -qq "qemu/$suite" >/dev/null
dsc=$(ls qemu_*.dsc | head -n1)
dpkg-source -x --no-check "$dsc" src >/dev/null
version=$(sed -n 's/^Version: //p' "$dsc" | head -n1)
version=${version#*:}   # the epoch is no part of a directory name
say "QEMU $version"

# The Python used by configure must see meson >= 1.5 (Debian 12's is older).
/usr/bin/python3 -m venv venv
venv/bin/pip install -q 'meson>=1.5' 'pycotap==1.3.1'

mkdir src/build
cd src/build
say "configure"
PATH=$work/venv/bin:$PATH ../configure --python="$work/venv/bin/python3" \
  --target-list=x86_64-linux-user --enable-plugins --disable-docs --disable-install-blobs \
  --disable-system --disable-tools >configure.log 2>&1 || {
  tail -n 30 configure.log >&2
  say "configure failed (the whole log: $PWD/configure.log)"
  exit 1
}
say "ninja qemu-x86_64 (-j$jobs, a few minutes)"
PATH=$work/venv/bin:$PATH ninja -j"$jobs" qemu-x86_64 >ninja.log 2>&1 || {
  tail -n 30 ninja.log >&2
  say "the build failed (the whole log: $PWD/ninja.log)"
  exit 1
}

mkdir -p "$cache/$version"
install -m 0755 qemu-x86_64 "$cache/$version/qemu-x86_64"
echo "$version" >"$cache/$suite.version"
cd "$cache"
rm -rf "$work"
say "built; rtit record takes it where no qemu-x86_64 on PATH loads plugins (else: --qemu or RTIT_QEMU)"
echo "$cache/$version/qemu-x86_64"
