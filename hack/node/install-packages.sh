#!/usr/bin/env bash
# Installs the Debian packages of a list at the versions listed there, or warns about the pins that have gone stale.
#
#   hack/node/install-packages.sh [LIST [MAKE_TARGET]]
#   hack/node/install-packages.sh --check LIST...
#
# LIST defaults to hack/node/packages.txt (the node tier's container runtime, CNI plugins, nftables, and the image
# builder), e.g. `hack/node/install-packages.sh hack/webui/packages.txt test-webui` (Chromium for
# `make test-webui`); MAKE_TARGET names the make target to rerun with sudo in the "must run as root" message.
# A list holds one `release: <codename>` line, the Debian release every pin comes from, and `name version` lines.
#
# Invariants:
# - The listed versions are the tested ones: each is installed exactly while the mirror has it. Debian drops a
#   superseded (security) update from its mirror; then that package's current candidate is installed instead, but
#   only when Debian itself serves it for the same release (<codename>, <codename>-updates or
#   <codename>-security). One line names both versions. Another release, origin or package is never used: that
#   is a failure.
# - Idempotent: when every package is installed at its listed version, or at the newer same-release candidate that
#   replaced a listed version gone from the local index, it changes nothing, asks no mirror and does not need root.
# - --check only reads the local apt index (apt-cache policy): one warning lists the pins that are no longer the
#   candidate, so they get bumped before they leave the mirror. It always exits 0.
# - Daemons are never started by the install (the node tier runs containerd itself, with its own root and socket).
# - Every failure is one line that names the cause and the fix.
set -euo pipefail

me=hack/node/install-packages.sh
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export LC_ALL=C # apt-cache policy's labels, parsed below

# read_list LIST: sets `release` and the parallel arrays `names` and `pins`.
read_list() {
  local list="$1" name version
  if [[ ! -r "$list" ]]; then
    echo "$me: no package list $list" >&2
    exit 1
  fi
  release="" names=() pins=()
  while read -r name version; do
    [[ -z "$name" || "$name" == \#* ]] && continue
    if [[ "$name" == release: ]]; then release="$version"; else names+=("$name") pins+=("$version"); fi
  done <"$list"
  if [[ -z "$release" ]]; then
    echo "$me: $list has no \`release: <codename>\` line naming the Debian release of its pins (e.g. release: bookworm)" >&2
    exit 1
  fi
}

# resolve NAME...: one line per package the local apt index knows,
#   name <TAB> candidate <TAB> the candidate's origin/codename pairs (e.g. Debian/bookworm-security) <TAB> |versions|
# from `apt-cache policy` (the origin o= and codename n= of each package file's Release) and `apt-cache policy
# NAME...` (each version and the package files serving it). Two calls whatever the count: each parses the index.
resolve() {
  awk -v OFS='\t' '
    function key(  k, i) { k = $2; for (i = 3; i <= NF; i++) k = k " " $i; return k }
    function flush() {
      if (name != "") print name, candidate, origins == "" ? "-" : origins, versions
      name = ""
    }
    FNR == 1 { file++ }
    file == 1 && /^ *-?[0-9]+ / { current = key(); next }
    file == 1 && /^ +release / {
      n = split($2, fields, ",")
      for (i = 1; i <= n; i++) {
        if (fields[i] ~ /^o=/) origin[current] = substr(fields[i], 3)
        if (fields[i] ~ /^n=/) codename[current] = substr(fields[i], 3)
      }
      next
    }
    file == 1 { next }
    /^[^ ].*:$/ {
      flush()
      name = substr($0, 1, length($0) - 1); candidate = "(none)"; version = ""; origins = ""; versions = "|"
      next
    }
    /^  Candidate: / { candidate = $2; next }
    /^ \*\*\* / || /^     [^ ]/ { version = ($1 == "***") ? $2 : $1; versions = versions version "|"; next }
    /^        [^ ]/ && version == candidate && key() in codename {
      k = key()
      origins = origins (origins == "" ? "" : ",") origin[k] "/" codename[k]
    }
    END { flush() }
  ' <(apt-cache policy) <(apt-cache policy "$@")
}

# load_index NAME...: the lines of `resolve`, keyed by name, in the associative arrays cand, origins and versions.
declare -A cand origins versions
load_index() {
  local name candidate from table
  cand=() origins=() versions=()
  (($#)) || return 0
  while IFS=$'\t' read -r name candidate from table; do
    cand[$name]="$candidate" origins[$name]="$from" versions[$name]="$table"
  done < <(resolve "$@")
}

# replaces NAME PIN: whether NAME's candidate may stand in for PIN, which the index lacks: it is newer, and Debian
# serves it for $release (the release itself, its -updates or its -security suite).
replaces() {
  local name="$1" pin="$2" from
  [[ -n "${cand[$name]:-}" && "${cand[$name]}" != "(none)" && "${versions[$name]}" != *"|$pin|"* ]] || return 1
  dpkg --compare-versions "${cand[$name]}" gt "$pin" || return 1
  for from in ${origins[$name]//,/ }; do
    case "$from" in "Debian/$release" | "Debian/$release-updates" | "Debian/$release-security") return 0 ;; esac
  done
  return 1
}

if [[ "${1:-}" == --check ]]; then
  shift
  command -v apt-cache >/dev/null || exit 0 # not a Debian host: nothing here installs these packages
  checked=() # list <TAB> name <TAB> pin, of every list, resolved at once
  for list in "$@"; do
    read_list "$list"
    for i in "${!names[@]}"; do checked+=("$list"$'\t'"${names[$i]}"$'\t'"${pins[$i]}"); done
  done
  load_index $(printf '%s\n' "${checked[@]}" | cut -f2 | sort -u)
  if ((${#cand[@]} == 0)); then
    echo "warning: Debian pins not checked: the local apt index knows none of their packages (apt-get update)" >&2
    exit 0
  fi
  stale=()
  for line in "${checked[@]}"; do
    IFS=$'\t' read -r list name pin <<<"$line"
    if [[ "${cand[$name]:-(none)}" == "(none)" ]]; then
      stale+=("$name $pin -> not in the local apt index ($list)")
    elif [[ "${cand[$name]}" != "$pin" ]]; then
      stale+=("$name $pin -> ${cand[$name]} of ${origins[$name]} ($list)")
    fi
  done
  if ((${#stale[@]})); then
    echo "warning: Debian pins that are no longer apt's candidate (test the new version, then bump the list):" >&2
    printf '  %s\n' "${stale[@]}" >&2
  fi
  exit 0
fi

list="${1:-$here/packages.txt}"
target="${2:-node-packages}"
read_list "$list"
if ! command -v dpkg-query >/dev/null || ! command -v apt-get >/dev/null; then
  echo "$me: apt-get not found: the packages of $list need a Debian or Ubuntu host" >&2
  exit 1
fi

# installed_at NAME VERSION: whether dpkg has NAME installed at exactly VERSION.
installed_at() { [[ "$(dpkg-query -W -f='${Status} ${Version}' "$1" 2>/dev/null || true)" == "install ok installed $2" ]]; }

wanted=() # indexes into names and pins
for i in "${!names[@]}"; do installed_at "${names[$i]}" "${pins[$i]}" || wanted+=("$i"); done
if ((${#wanted[@]})); then
  # A replacement installed earlier, while the listed version is still missing from the local index, is kept.
  load_index $(for i in "${wanted[@]}"; do echo "${names[$i]}"; done)
  missing=()
  for i in "${wanted[@]}"; do
    name="${names[$i]}"
    replaces "$name" "${pins[$i]}" && installed_at "$name" "${cand[$name]}" || missing+=("$i")
  done
  wanted=("${missing[@]}")
fi
((${#wanted[@]})) || exit 0

if [[ "$(id -u)" != 0 ]]; then
  echo "$me: must run as root to install $(for i in "${wanted[@]}"; do printf '%s ' "${names[$i]}=${pins[$i]}"; done)(apt-get): sudo make $target" >&2
  exit 1
fi

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
  echo "$me: apt-get update failed: the Debian mirror in /etc/apt/sources.list* must be reachable" >&2
  exit 1
fi

load_index $(for i in "${wanted[@]}"; do echo "${names[$i]}"; done)
install=()
for i in "${wanted[@]}"; do
  name="${names[$i]}" pin="${pins[$i]}"
  if [[ "${versions[$name]:-}" == *"|$pin|"* ]]; then
    install+=("$name=$pin")
  elif replaces "$name" "$pin"; then
    echo "$me: $name $pin has left the mirror; installing $name ${cand[$name]} (${origins[$name]}) instead: test it, then bump $list" >&2
    install+=("$name=${cand[$name]}")
  else
    echo "$me: $name $pin is not on the mirror and no newer $name of Debian $release replaces it (candidate ${cand[$name]:-(none)} from ${origins[$name]:--}): fix the version in $list (apt-cache policy $name)" >&2
    exit 1
  fi
done

echo "installing ${install[*]}" >&2
if ! timeout "$apt_timeout" apt-get install -y -qq --no-install-recommends --download-only "${install[@]}" >/dev/null; then
  echo "$me: downloading ${install[*]} failed or took over ${apt_timeout} s (the mirror in /etc/apt/sources.list* must be reachable)" >&2
  exit 1
fi
if ! apt-get install -y -qq --no-install-recommends "${install[@]}" >/dev/null; then
  echo "$me: apt-get install ${install[*]} failed (see apt-get's message above)" >&2
  exit 1
fi
