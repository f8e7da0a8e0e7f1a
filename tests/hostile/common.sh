# shellcheck shell=sh disable=SC2034 # variables for the agents that source this
# Sourced by every agent in this folder. The agent's command line is
#   sh AGENT.sh {ward} LOOT [ARGS...]
# where {ward} is the ward binary (for the stand-in at the end) and LOOT the
# file it writes what it found into. HOSTILE_PARENT, when set, names the
# process to attack instead of the parent (all.sh runs the others).
WARD_BIN=$1
LOOT=$2
shift 2
PARENT=${HOSTILE_PARENT:-$PPID}

# What GitHub credentials look like: tokens (ghp_ gho_ ghu_ ghs_ ghr_
# github_pat_), the runner's JWTs, and its per-job service URLs.
TOKEN_SHAPES='gh[pousr]_[A-Za-z0-9_]{10,}|github_pat_[A-Za-z0-9_]{10,}|eyJ[A-Za-z0-9_.-]{10,}|https://[A-Za-z0-9.-]*actions\.githubusercontent\.com[A-Za-z0-9._~:/?#@!$&()*+,;=%-]*'

loot() { printf '%s\n' "$*" >> "$LOOT"; }

# The attack is over: behave like a harmless agent, so the stage ends as usual.
finish() { exec "$WARD_BIN" stand-in; }
