#!/bin/sh
# A child that daemonises (its own session, out of the agent's process
# group), outlives the agent, and then keeps rewriting the sealed visit:
# the folder ward seals it into (read from ward's command line, `--out`).
# Inert when ward kills it before sealing. (Rewriting $WARD_NOTES in the
# moment between the agent's end and ward's reading is no attack: the
# agent writes its notes anyway.)
. "$(dirname "$0")/common.sh"
# The first ancestor whose command line has `--out` (behind the walls the
# parent is ward's relay, and ward above it).
pid=$PARENT
out=
while [ -z "$out" ] && [ "${pid:-0}" -gt 1 ]; do
  out=$(tr '\0' '\n' < "/proc/$pid/cmdline" 2>/dev/null | sed -n '/^--out$/{n;p;}')
  pid=$(sed -n 's/^PPid:[[:space:]]*//p' "/proc/$pid/status" 2>/dev/null)
done
loot "agent $$ seals into ${out:-nowhere}"
AGENT=$$ OUT=$out LOOT=$LOOT setsid sh -c '
  echo "daemon $$" >> "$LOOT"
  while kill -0 "$AGENT" 2>/dev/null; do sleep 0.01; done
  i=0
  while [ $i -lt 300 ]; do
    if [ -n "$OUT" ]; then mkdir -p "$OUT" && echo "FORGED by the daemon" > "$OUT/notes.md"; fi
    sleep 0.01
    i=$((i + 1))
  done
  echo "daemon survived" >> "$LOOT"
' < /dev/null > /dev/null 2>&1 &
# The daemon is up before the agent ends (else it proves nothing).
i=0
while ! grep -q '^daemon ' "$LOOT" && [ $i -lt 500 ]; do sleep 0.01; i=$((i + 1)); done
finish
