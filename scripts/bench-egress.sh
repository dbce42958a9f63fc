#!/usr/bin/env bash
# Benchmark: the cost of an egress allow-list, through vibesys's proxy
# against direct, in one run, under bwrap.
#   download   a 256 MiB file from a loopback server: curl inside
#              `vibesys exec --allow-host 127.0.0.1:PORT` (through the
#              forwarder and the proxy) vs curl inside `vibesys exec`
#              with the host network (direct). Goal: >= 0.8x direct.
#   requests   200 small GETs, one new connection each, from one Python
#              process inside the sandbox: through the proxy vs direct.
#              Goal: < 1 ms added per request.
#   launch     `vibesys exec --allow-host ... -- /bin/true` vs `vibesys
#              exec -- /bin/true`: what starting the proxy and the
#              forwarder adds to a launch (medians of interleaved rounds).
# The machine's floor for each: the same client on the host, unconfined.
# Everything stays on loopback. Prints medians and ratios.
#
#   scripts/bench-egress.sh [--rounds N]   (default 5; launch uses 4N)
#
# Needs: a built target/debug/vibesys (or VIBESYS=path), bwrap, curl,
# python3.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
vibesys=${VIBESYS:-$here/target/debug/vibesys}
rounds=5
case "${1:-}" in
--rounds) rounds=$2 ;;
"") ;;
*) echo "usage: $0 [--rounds N]" >&2; exit 2 ;;
esac
for t in bwrap curl python3; do
  command -v "$t" >/dev/null || { echo "bench-egress.sh: $t is needed" >&2; exit 1; }
done
[ -x "$vibesys" ] || { echo "bench-egress.sh: build vibesys first (cargo build -p vibesys)" >&2; exit 1; }

work=$(mktemp -d /var/tmp/bench-egress.XXXXXX)
server_pid=
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/project" "$work/www"
head -c $((256 << 20)) /dev/zero >"$work/www/big"
echo small >"$work/www/small"
cd "$work/project"
git init -q .

python3 - "$work/www" "$work/port" <<'EOF' &
import http.server, socketserver, sys, os, functools
root, port_file = sys.argv[1], sys.argv[2]
class H(http.server.SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.0"
    def log_message(self, *a): pass
class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
s = S(("127.0.0.1", 0), functools.partial(H, directory=root))
open(port_file + ".tmp", "w").write(str(s.server_address[1]))
os.rename(port_file + ".tmp", port_file)
s.serve_forever()
EOF
server_pid=$!
for _ in $(seq 100); do [ -s "$work/port" ] && break; sleep 0.05; done
port=$(cat "$work/port")
allow=(--allow-host "127.0.0.1:$port")

cat >"$work/project/requests.py" <<EOF
import time, urllib.request, os
n = 200
url = "http://127.0.0.1:$port/small"
opener = urllib.request.build_opener() if os.environ.get("HTTP_PROXY") else urllib.request.build_opener(urllib.request.ProxyHandler({}))
opener.open(url).read()
t = time.perf_counter()
for _ in range(n):
    opener.open(url).read()
print((time.perf_counter() - t) / n * 1000)
EOF

download='curl -sS -o /dev/null -w %{speed_download} http://127.0.0.1:'"$port"'/big'
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

: >"$work/dl-proxy" >"$work/dl-direct" >"$work/dl-host"
: >"$work/rq-proxy" >"$work/rq-direct" >"$work/rq-host"
for _ in $(seq "$rounds"); do
  "$vibesys" exec "${allow[@]}" -- sh -c "$download" >>"$work/dl-proxy"; echo >>"$work/dl-proxy"
  "$vibesys" exec -- sh -c "$download" >>"$work/dl-direct"; echo >>"$work/dl-direct"
  sh -c "$download" >>"$work/dl-host"; echo >>"$work/dl-host"
  "$vibesys" exec "${allow[@]}" -- python3 requests.py >>"$work/rq-proxy"
  "$vibesys" exec -- env -u HTTP_PROXY -u http_proxy python3 requests.py >>"$work/rq-direct"
  env -u HTTP_PROXY -u http_proxy python3 requests.py >>"$work/rq-host"
done

launch() {
  python3 - "$@" <<'EOF'
import subprocess, sys, time
t = time.perf_counter()
subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL)
print((time.perf_counter() - t) * 1000)
EOF
}
: >"$work/ln-proxy" >"$work/ln-direct"
for _ in $(seq $((rounds * 4))); do
  launch "$vibesys" exec "${allow[@]}" -- /bin/true >>"$work/ln-proxy"
  launch "$vibesys" exec -- /bin/true >>"$work/ln-direct"
done

mib() { awk '{printf "%.0f", $1 / 1048576}'; }
dp=$(grep . "$work/dl-proxy" | median)
dd=$(grep . "$work/dl-direct" | median)
dh=$(grep . "$work/dl-host" | median)
rp=$(median <"$work/rq-proxy")
rd=$(median <"$work/rq-direct")
rh=$(median <"$work/rq-host")
lp=$(median <"$work/ln-proxy")
ld=$(median <"$work/ln-direct")
echo "bench-egress: $(nproc) cores, $(uname -r), rounds $rounds, $(date -u +%F)"
printf '%-34s %10s %10s %8s %12s\n' "measure" "proxy" "direct" "ratio" "host floor"
printf '%-34s %10s %10s %8s %12s\n' "256 MiB download (MiB/s)" "$(echo "$dp" | mib)" "$(echo "$dd" | mib)" \
  "$(awk -v a="$dp" -v b="$dd" 'BEGIN {printf "%.2fx", a / b}')" "$(echo "$dh" | mib)"
printf '%-34s %10.3f %10.3f %8s %12.3f\n' "small request (ms each, of 200)" "$rp" "$rd" \
  "$(awk -v a="$rp" -v b="$rd" 'BEGIN {printf "+%.3f", a - b}')" "$rh"
printf '%-34s %10.1f %10.1f %8s %12s\n' "launch of /bin/true (ms)" "$lp" "$ld" \
  "$(awk -v a="$lp" -v b="$ld" 'BEGIN {printf "+%.1f", a - b}')" "-"
