#!/usr/bin/env bash
# Installs the Debian packages of a list, at exactly the versions listed there. The list is hack/node/packages.txt
# (the node tier's container runtime, CNI plugins, nftables, and the image builder) unless one is given:
#
#   hack/node/install-packages.sh [LIST [MAKE_TARGET]]
#
# e.g. `hack/node/install-packages.sh hack/webui/packages.txt test-webui` (Chromium for `make test-webui`);
# MAKE_TARGET names the make target to rerun with sudo in the "must run as root" message.
#
# Invariants:
# - Idempotent: when every package is installed at its listed version it changes nothing, asks no mirror and does
#   not need root.
# - Daemons are never started by the install (the node tier runs containerd itself, with its own root and socket).
# - Every failure is one line that names the cause and the fix.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
list="${1:-$here/packages.txt}"
target="${2:-node-packages}"

if [[ ! -r "$list" ]]; then
  echo "hack/node/install-packages.sh: no package list $list" >&2
  exit 1
fi
if ! command -v dpkg-query >/dev/null || ! command -v apt-get >/dev/null; then
  echo "hack/node/install-packages.sh: apt-get not found: the packages of $list need a Debian or Ubuntu host" >&2
  exit 1
fi

wanted=()
while read -r name version; do
  [[ -z "$name" || "$name" == \#* ]] && continue
  installed="$(dpkg-query -W -f='${Status} ${Version}' "$name" 2>/dev/null || true)"
  [[ "$installed" == "install ok installed $version" ]] || wanted+=("$name=$version")
done <"$list"

((${#wanted[@]})) || exit 0

if [[ "$(id -u)" != 0 ]]; then
  echo "hack/node/install-packages.sh: must run as root to install ${wanted[*]} (apt-get): sudo make $target" >&2
  exit 1
fi

echo "installing ${wanted[*]}" >&2
# policy-rc.d exit 101 tells Debian's maintainer scripts not to start services; put back whatever was there.
policy=/usr/sbin/policy-rc.d
saved=""
if [[ -e "$policy" ]]; then saved="$(mktemp)"; cp -p "$policy" "$saved"; fi
restore() { if [[ -n "$saved" ]]; then mv "$saved" "$policy"; else rm -f "$policy"; fi; }
trap restore EXIT
printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy"

export DEBIAN_FRONTEND=noninteractive
# What talks to the mirror is bounded (APT_TIMEOUT seconds each, default 900) and safe to stop: the index update
# and the download. The install itself then reads only the local archive.
apt_timeout="${APT_TIMEOUT:-900}"
if ! timeout "$apt_timeout" apt-get update -qq >/dev/null 2>&1 && ! timeout "$apt_timeout" apt-get update; then
  echo "hack/node/install-packages.sh: apt-get update failed: the Debian mirror in /etc/apt/sources.list* must be reachable" >&2
  exit 1
fi
if ! timeout "$apt_timeout" apt-get install -y -qq --no-install-recommends --download-only "${wanted[@]}" >/dev/null; then
  echo "hack/node/install-packages.sh: downloading ${wanted[*]} failed or took over ${apt_timeout} s (a version in $list may have left the mirror: see apt-cache policy <name>)" >&2
  exit 1
fi
if ! apt-get install -y -qq --no-install-recommends "${wanted[@]}" >/dev/null; then
  echo "hack/node/install-packages.sh: apt-get install ${wanted[*]} failed (a version in $list may have left the mirror: see apt-cache policy <name>)" >&2
  exit 1
fi
