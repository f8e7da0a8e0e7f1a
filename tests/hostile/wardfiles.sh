#!/bin/sh
# In treatment, commits ward's own files (its stage lock and state under
# .ward/), as an agent that commits everything would: first `git add -A`
# (ward's info/exclude keeps them out of that), then by force. ward refuses
# the run, naming the paths, and pushes nothing.
. "$(dirname "$0")/common.sh"
if [ "$WARD_STAGE" = treat ]; then
  if [ -d .ward ]; then
    git add -A
    if git diff --cached --name-only | grep -q '^\.ward/'; then
      loot "git add -A staged .ward"
    else
      loot "git add -A left .ward out"
    fi
    git add -f .ward
    git -c user.name=agent -c user.email=agent@example.invalid commit -q -m "everything" \
      && loot "committed $(git show --name-only --format= HEAD | grep '^\.ward/' | head -n 1)"
  else
    loot "no .ward in the work tree"
  fi
fi
finish
