#!/bin/sh
# Attack: change the repository in a stage where that is not allowed. In
# the stage whose mode is the first argument it appends a line to every
# path that follows (creating the file and its folders when missing),
# commits half of them itself and leaves the rest in the worktree, as an
# agent that wants its change to ride along would. In every other stage it
# is the harmless stand-in. Loot: what it changed, and where.
. "$(dirname "$0")/common.sh"
target=$1
shift
if [ "${WARD_MODE:-}" = "$target" ]; then
  n=0
  for path in "$@"; do
    mkdir -p "$(dirname "$path")"
    printf '%s\n' "hostile edit in $WARD_MODE" >> "$path"
    n=$((n + 1))
    if [ $((n % 2)) -eq 1 ]; then
      git add -- "$path" && git -c user.name=mallory -c user.email=mallory@invalid commit -q -m "hostile: $path" -- "$path"
    fi
    loot "edited $path in $WARD_MODE (stage $WARD_STAGE, worktree $PWD)"
  done
fi
finish
