#!/bin/sh
# Not an attack on ward itself: it records the prompt each stage gives it,
# so a test can check what issue text reached the agent. Loot: one
# `== PROMPT <stage>` header per stage, then the prompt.
. "$(dirname "$0")/common.sh"
loot "== PROMPT ${WARD_STAGE:-}"
cat "$WARD_PROMPT" >> "$LOOT"
loot "== END PROMPT"
finish
