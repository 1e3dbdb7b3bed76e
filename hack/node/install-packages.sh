#!/usr/bin/env bash
# Installs the Debian packages of a list at the versions listed there, or warns about the pins that have gone stale.
#
#   hack/node/install-packages.sh [LIST [MAKE_TARGET]]
#   hack/node/install-packages.sh --check LIST...
#   hack/node/install-packages.sh --explain STATUS OUTPUT [STEP]
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
# - Every failure is one line that names the cause and the fix. An apt step that fails is explained from apt's own
#   output (`explain`): an install interrupted earlier, a lock another process holds (with its pid), a package or
#   version the index lacks, the network or the mirror, a full disk, broken dependencies, dpkg's own failure; what
#   none of these matches quotes apt's error and keeps its whole output in a file the line names. --explain prints
#   that line for an exit status and a file of apt's output, and changes nothing.
# - An install that an earlier one left interrupted (apt: "dpkg was interrupted") is finished with
#   `dpkg --configure -a` (no daemon starts: policy-rc.d is in place), said in one line, and the step runs again,
#   once. Nothing else is repaired: a lock is waited out by no one, a full disk is freed by no one.
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

# lock_holder FILE: "PID (COMMAND)" of a process holding a POSIX lock on FILE (from /proc/locks), or nothing.
lock_holder() {
  local inode pid
  inode="$(stat -c %i "$1" 2>/dev/null)" || return 0
  pid="$(awk -v inode="$inode" '{ n = split($6, id, ":"); if (id[n] == inode) { print $5; exit } }' /proc/locks 2>/dev/null)"
  [[ -n "$pid" ]] && echo "$pid ($(cat "/proc/$pid/comm" 2>/dev/null || echo "gone"))"
  return 0
}

# explain STEP STATUS OUTPUT: why an apt step failed, read from apt's own output (the file OUTPUT) and its exit
# STATUS (124: `timeout` stopped it), and what fixes it, as one line.
explain() {
  local step="$1" status="$2" output="$3" line name version holder path host free
  local rerun="then rerun${target:+ (sudo make $target)}" listed="${list:-the package list}"
  first() { grep -m1 -E "$1" "$output" || true; }
  if ((status == 124)); then
    echo "$step took over ${apt_timeout:-900} s and was stopped: the mirror in /etc/apt/sources.list* is slow or unreachable from here (check the network and any proxy), or allow more time with APT_TIMEOUT=<seconds>"
  elif [[ -n "$(first "dpkg was interrupted")" ]]; then
    echo "$step failed: an earlier install was interrupted before it finished (apt: dpkg was interrupted): run \`sudo dpkg --configure -a\` to finish it, $rerun"
  elif line="$(first "^E: Could not get lock |^E: Unable to (acquire the dpkg frontend lock|lock the administration directory|lock directory|lock the download directory)")" && [[ -n "$line" ]]; then
    if [[ "$line" == *"are you root?"* ]]; then
      echo "$step failed: apt's lock cannot be taken without root (apt: ${line#E: }): run it as root${target:+ (sudo make $target)}"
      return 0
    fi
    path="$(sed -nE 's/^E: Could not get lock (.+)\. It is held by process .*/\1/p; s/^E: Could not get lock ([^ ]+)( - .*)?$/\1/p; s/^E: Unable to [a-z ]+ \(([^)]+)\).*/\1/p; s/^E: Unable to lock directory (.+)$/\1/p' <<<"$line")"
    holder="$(sed -nE 's/.*It is held by process ([0-9]+) \((.*)\)$/\1 (\2)/p; s/.*It is held by process ([0-9]+)$/\1/p' <<<"$line")"
    [[ -n "$holder" || -z "$path" ]] || holder="$(lock_holder "$path")"
    [[ -n "$path" ]] || path="(named in apt's output)"
    if [[ -n "$holder" ]]; then
      echo "$step failed: another process, pid $holder, holds apt's lock $path: wait for it to finish (or stop it if it hangs), $rerun"
    else
      echo "$step failed: another apt or dpkg holds apt's lock $path (it has ended since, or its pid is unknown): wait for it to finish, $rerun"
    fi
  elif line="$(first "You don't have enough free space in ")" && [[ -n "$line" ]]; then
    path="$(sed -nE "s/.*enough free space in (.+)\.\$/\1/p" <<<"$line")"
    free="$(df -h --output=avail "$path" 2>/dev/null | tail -1 | tr -d ' ' || true)"
    echo "$step failed: the disk is full: not enough free space in $path${free:+ ($free available)}: free some there (apt-get clean empties apt's cache), $rerun"
  elif line="$(first "No space left on device")" && [[ -n "$line" ]]; then
    echo "$step failed: the disk is full (No space left on device): free some space on / and /var (df -h / /var), run \`sudo dpkg --configure -a\`, $rerun"
  elif line="$(first "^E: Unable to locate package ")" && [[ -n "$line" ]]; then
    name="${line#E: Unable to locate package }"
    echo "$step failed: apt knows no package $name: fix its name in $listed, or add the Debian release that has it to /etc/apt/sources.list* and apt-get update"
  elif line="$(first "^E: Version '.*' for '.*' was not found")" && [[ -n "$line" ]]; then
    version="$(sed -nE "s/^E: Version '(.*)' for '(.*)' was not found.*/\1/p" <<<"$line")"
    name="$(sed -nE "s/^E: Version '(.*)' for '(.*)' was not found.*/\2/p" <<<"$line")"
    echo "$step failed: the mirror has no $name $version: fix the version in $listed (apt-cache policy $name)"
  elif line="$(first "^E: Package '.*' has no installation candidate")" && [[ -n "$line" ]]; then
    name="$(sed -nE "s/^E: Package '(.*)' has no installation candidate.*/\1/p" <<<"$line")"
    echo "$step failed: no version of $name can be installed from /etc/apt/sources.list*: fix $listed (apt-cache policy $name)"
  elif line="$(first "Temporary failure resolving|Could not resolve ")" && [[ -n "$line" ]]; then
    host="$(sed -nE "s/.*(Temporary failure resolving|Could not resolve) '([^']*)'.*/\2/p" <<<"$line")"
    echo "$step failed: the host name $host does not resolve (DNS): check /etc/resolv.conf and any proxy in /etc/apt/apt.conf.d, $rerun"
  elif line="$(first "Could not connect to |Unable to connect to |Connection failed|[Cc]onnection timed out|Network is unreachable|No route to host")" && [[ -n "$line" ]]; then
    echo "$step failed: the mirror in /etc/apt/sources.list* cannot be reached from here (apt: $(sed -nE 's/^(E|W): Failed to fetch [^ ]+ +//; s/^ +//; p' <<<"$line")): check the network, firewall and any proxy, $rerun"
  elif line="$(first " 404 +Not Found")" && [[ -n "$line" ]]; then
    echo "$step failed: the mirror no longer has a file the local index names (apt: ${line#E: }): the index is out of date or the mirror mid-sync: sudo apt-get update (its warnings say why it could not refresh), $rerun"
  elif line="$(first "Hash Sum mismatch|File has unexpected size|Bad header line")" && [[ -n "$line" ]]; then
    echo "$step failed: the mirror served files that do not match its index (apt: ${line#E: }): it is mid-sync, or a proxy alters them: wait a while, $rerun"
  elif line="$(first "NO_PUBKEY|is not signed|signatures couldn't be verified|EXPKEYSIG")" && [[ -n "$line" ]]; then
    echo "$step failed: a repository's signature cannot be checked (apt: ${line#[EW]: }): install its key (debian-archive-keyring for Debian's) or fix its Signed-By in /etc/apt/sources.list*, $rerun"
  elif line="$(first "is not valid yet")" && [[ -n "$line" ]]; then
    echo "$step failed: the mirror's index is dated in the future for this host (apt: ${line#[EW]: }): set the system clock right, $rerun"
  elif [[ -n "$(first "unmet dependencies|you have held broken packages")" ]]; then
    echo "$step failed: the packages' dependencies cannot be met together with what is installed or held (apt-mark showhold): \`apt-get install -s\` of the same packages says which; fix $listed or the holds, $rerun"
  elif line="$(first "^E: Sub-process .* returned an error code|^dpkg: error processing")" && [[ -n "$line" ]]; then
    echo "$step failed: dpkg could not install a package (a maintainer script or a file conflict; its messages: $output): fix what dpkg reports, run \`sudo dpkg --configure -a\`, $rerun"
  else
    line="$(first "^E: ")"
    echo "$step failed (exit status $status)${line:+: apt: ${line#E: }}: apt's whole output is in $output"
  fi
}

if [[ "${1:-}" == --explain ]]; then
  if (($# < 3)); then
    echo "usage: $me --explain STATUS OUTPUT [STEP]" >&2
    exit 2
  fi
  explain "${4:-apt-get}" "$2" "$3"
  exit 0
fi

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
# apt's output goes to a file: explained in one line on a failure (the file is then kept), removed on success.
apt_output="$(mktemp "${TMPDIR:-/tmp}/llmaz-apt.XXXXXX")"
keep_output=""
trap 'restore; [[ -n "$keep_output" ]] || rm -f "$apt_output"' EXIT
repaired=""

# run_apt STEP COMMAND...: run an apt step; on a failure say why and exit 1, after finishing an interrupted install
# with `dpkg --configure -a` and running the step again, once.
run_apt() {
  local step="$1" status=0 line
  shift
  "$@" >"$apt_output" 2>&1 || status=$?
  ((status)) || return 0
  if [[ -z "$repaired" ]] && grep -q "dpkg was interrupted" "$apt_output"; then
    repaired=1
    echo "$me: an earlier install was interrupted before it finished (apt: dpkg was interrupted): running dpkg --configure -a to finish it, then $step again" >&2
    if timeout "$apt_timeout" dpkg --configure -a >"$apt_output" 2>&1; then
      status=0
      "$@" >"$apt_output" 2>&1 || status=$?
      ((status)) || return 0
    else
      status=$?
      step="dpkg --configure -a (finishing an interrupted install)"
    fi
  fi
  line="$(explain "$step" "$status" "$apt_output")"
  [[ "$line" != *"$apt_output"* ]] || keep_output=1 # named in the line: kept for the reader
  echo "$me: $line" >&2
  exit 1
}

# Once more on a failure: a mirror's hiccup passes.
timeout "$apt_timeout" apt-get update -qq >/dev/null 2>&1 || run_apt "apt-get update" timeout "$apt_timeout" apt-get update

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
run_apt "downloading ${install[*]}" timeout "$apt_timeout" apt-get install -y -qq --no-install-recommends --download-only "${install[@]}"
run_apt "apt-get install ${install[*]}" apt-get install -y -qq --no-install-recommends "${install[@]}"
