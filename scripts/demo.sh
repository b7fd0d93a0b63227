#!/usr/bin/env bash
# `make demo`: Tether's main job in a few seconds, with the bundled mock agent and a
# private TETHER_HOME that is removed afterwards: a warm session, two prompts (the second
# one warm), the session's history read back from its journal, and a close that proves
# nothing it started survives.
set -euo pipefail
tether="${TETHER:-.venv/bin/tether}"
TETHER_HOME="$(mktemp -d "${TMPDIR:-/tmp}/tether-demo.XXXXXX")"
export TETHER_HOME
cleanup() {
  "$tether" mock sessions close -s demo >/dev/null 2>&1 || true
  rm -rf "$TETHER_HOME"
}
trap cleanup EXIT

show() { printf '\n\033[1m$ tether %s\033[0m\n' "$*" >&2; }
ms_since() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }

show mock sessions new -s demo
"$tether" mock sessions new -s demo

show mock prompt -s demo '"stream 3 hello from a cold agent"'
start=$(date +%s%N)
"$tether" mock prompt -s demo "stream 3 hello from a cold agent"
printf '(first prompt, starting the agent: %s ms)\n' "$(ms_since "$start")" >&2

show mock prompt -s demo '"echo and again, warm"'
start=$(date +%s%N)
"$tether" mock prompt -s demo "echo and again, warm"
printf '(warm prompt: %s ms)\n' "$(ms_since "$start")" >&2

show mock sessions history -s demo
"$tether" mock sessions history -s demo

show mock sessions read -s demo --tail 1
"$tether" mock sessions read -s demo --tail 1

show mock sessions close -s demo
"$tether" mock sessions close -s demo
