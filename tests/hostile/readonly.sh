#!/bin/sh
# Attack: write outside what the agent was given (tests/walls.rs). Arguments
# after the loot file:  MAIN_GIT  OUTSIDE_HOME  OTHER_FOLDER  WRITABLE
# Tries ward's own run folder (where its visit is sealed, above $WARD_NOTES),
# the main repository's .git/config and .git/hooks, the runner's real HOME,
# /usr and /etc, and another folder of the same user: each must be refused
# (the rest of the system is read-only behind the walls). Its controls: the
# worktree, a commit on its branch, its private HOME, temp folder and
# /dev/shm, and the folder ward.yml's agent.writable names.
. "$(dirname "$0")/common.sh"
MAIN_GIT=$1 OUTSIDE_HOME=$2 OTHER=$3 WRITABLE=$4
RUN_FOLDER=$(dirname "$(dirname "$(dirname "$WARD_NOTES")")")
# One line per try: "write NAME: ok", or the shell's error.
try() {
  name=$1 file=$2
  if out=$( (printf 'attack\n' >> "$file") 2>&1); then loot "write $name: ok"; rm -f "$file"; else loot "write $name: $out"; fi
}
try "ward's run folder" "$RUN_FOLDER/attack"
try ".git/config" "$MAIN_GIT/config"
try ".git/hooks" "$MAIN_GIT/hooks/post-commit"
try "HOME outside" "$OUTSIDE_HOME/.gitconfig"
try "/usr" /usr/ward-attack
try "/etc" /etc/ward-attack
try "another folder" "$OTHER/attack"
try "control worktree" "$WARD_WORKTREE/ward-control"
try "control HOME" "$HOME/ward-control"
try "control TMPDIR" "$TMPDIR/ward-control"
try "control /dev/shm" /dev/shm/ward-control
try "control writable" "$WRITABLE/ward-control"
if out=$(git -C "$WARD_WORKTREE" -c user.name=a -c user.email=a@example.com commit -q --allow-empty -m probe 2>&1 &&
  git -C "$WARD_WORKTREE" reset -q --soft HEAD~1 2>&1); then loot "control commit: ok"; else loot "control commit: $out"; fi
finish
