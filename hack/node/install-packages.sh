#!/usr/bin/env bash
# Installs the Debian packages of hack/node/packages.txt (the node tier's container runtime, CNI plugins, nftables,
# and the image builder), at exactly the versions listed there.
#
# Invariants:
# - Idempotent: when every package is installed at its listed version it changes nothing and asks no mirror.
# - Daemons are never started by the install (the node tier runs containerd itself, with its own root and socket).
# - Every failure is one line that names the cause and the fix.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
list="$here/packages.txt"

if [[ "$(id -u)" != 0 ]]; then
  echo "hack/node/install-packages.sh: must run as root (the node tier runs kubelet and containerd): sudo make node-packages" >&2
  exit 1
fi
if ! command -v apt-get >/dev/null; then
  echo "hack/node/install-packages.sh: apt-get not found: the node tier needs a Debian or Ubuntu host" >&2
  exit 1
fi

wanted=()
while read -r name version; do
  [[ -z "$name" || "$name" == \#* ]] && continue
  installed="$(dpkg-query -W -f='${Status} ${Version}' "$name" 2>/dev/null || true)"
  [[ "$installed" == "install ok installed $version" ]] || wanted+=("$name=$version")
done <"$list"

((${#wanted[@]})) || exit 0

echo "installing ${wanted[*]}" >&2
# policy-rc.d exit 101 tells Debian's maintainer scripts not to start services; put back whatever was there.
policy=/usr/sbin/policy-rc.d
saved=""
if [[ -e "$policy" ]]; then saved="$(mktemp)"; cp -p "$policy" "$saved"; fi
restore() { if [[ -n "$saved" ]]; then mv "$saved" "$policy"; else rm -f "$policy"; fi; }
trap restore EXIT
printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy"

export DEBIAN_FRONTEND=noninteractive
if ! apt-get update -qq >/dev/null 2>&1 && ! apt-get update; then
  echo "hack/node/install-packages.sh: apt-get update failed: the Debian mirror in /etc/apt/sources.list* must be reachable" >&2
  exit 1
fi
if ! apt-get install -y -qq --no-install-recommends "${wanted[@]}" >/dev/null; then
  echo "hack/node/install-packages.sh: apt-get install ${wanted[*]} failed (a version in $list may have left the mirror: see apt-cache policy <name>)" >&2
  exit 1
fi
