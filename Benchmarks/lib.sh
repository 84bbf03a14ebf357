# Shared by the benchmarks (sourced): one nginx origin, and a rate-limited link in a network namespace.

# start_nginx: serves $WORK/www on a free loopback port; sets PORT and NGINX_PID once it answers.
# With NGINX_ACCESS_LOG=FILE, each request is logged there as: URI STATUS BODY_BYTES.
start_nginx() {
  local log="access_log off;"
  [ -n "${NGINX_ACCESS_LOG:-}" ] && log="log_format bytes '\$request_uri \$status \$body_bytes_sent'; access_log $NGINX_ACCESS_LOG bytes;"
  PORT=$(python3 -c "import socket; s=socket.socket(); s.bind(('',0)); print(s.getsockname()[1])")
  mkdir -p "$WORK/nginx/tmp"
  cat > "$WORK/nginx/nginx.conf" <<CONF
daemon off; user root root; worker_processes 2; pid $WORK/nginx/pid; error_log $WORK/nginx/error.log warn;
events { worker_connections 1024; }
http { $log sendfile on; keepalive_requests 100000; client_body_temp_path $WORK/nginx/tmp;
  server { listen $PORT; root $WORK/www; } }
CONF
  nginx -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf" & NGINX_PID=$!
  for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$PORT/" && break; sleep 0.1; done
}

# make_link NS PREFIX RATE_BITS BURST [MTU]: namespace NS joined to the host by a veth pair, the host
# side PREFIX.1 and NS's side PREFIX.2 (a /24), with tc tbf at RATE_BITS bit/s on what the host sends
# into NS (the download direction). Remove with: ip netns del NS; ip link del vNS.
make_link() {
  local ns=$1 prefix=$2 rate=$3 burst=$4 mtu=${5:-1500}
  ip netns add "$ns"
  ip link add "v$ns" type veth peer name "p$ns"
  ip link set "p$ns" netns "$ns"
  ip addr add "$prefix.1/24" dev "v$ns"; ip link set "v$ns" mtu "$mtu" up
  ip netns exec "$ns" ip addr add "$prefix.2/24" dev "p$ns"
  ip netns exec "$ns" ip link set "p$ns" mtu "$mtu" up
  ip netns exec "$ns" ip link set lo up
  tc qdisc add dev "v$ns" root tbf rate "${rate}bit" burst "$burst" latency 200ms
}

# make_routed_link NS NET RATE_BITS BURST [DELAY_MS [CC]]: namespace NS reaching the host through a router
# namespace rNS, with tc tbf at RATE_BITS bit/s (a 200 ms buffer) on the router's interface toward NS:
# the host is NET.0.1, the client in NS is NET.1.2. With DELAY_MS, what NS sends (requests, ACKs)
# crosses a fixed delay line on the router (Benchmarks/delayline.py; sets DELAYLINE_PID), so the link
# has a round trip like a player's. With CC (cubic, bbr), the host's connections to NS use that TCP
# congestion control (a route metric), whatever the machine's default. This is where a real bottleneck sits (a home router, the
# ISP's edge), away from the sender: with tbf on the sending host's own interface (make_link), TCP
# Small Queues keeps each flow's packets in its socket rather than in the qdisc, so the shared queue
# never grows and no one sees the delay another flow causes. Remove with:
# ip netns del NS; ip netns del rNS; ip link del vNS.
make_routed_link() {
  local ns=$1 net=$2 rate=$3 burst=$4 delay=${5:-} cc=${6:-} router=r$1
  ip netns add "$ns"; ip netns add "$router"
  ip link add "v$ns" type veth peer name "a$ns"
  ip link add "b$ns" type veth peer name "p$ns"
  ip link set "a$ns" netns "$router"; ip link set "b$ns" netns "$router"; ip link set "p$ns" netns "$ns"
  ip addr add "$net.0.1/24" dev "v$ns"; ip link set "v$ns" up
  ip route add "$net.1.0/24" via "$net.0.2" ${cc:+congctl "$cc"}
  ip netns exec "$router" sh -e -c "
    ip addr add $net.0.2/24 dev a$ns; ip link set a$ns up
    ip addr add $net.1.1/24 dev b$ns; ip link set b$ns up
    ip link set lo up; sysctl -q -w net.ipv4.ip_forward=1
    tc qdisc add dev b$ns root tbf rate ${rate}bit burst $burst latency 200ms"
  ip netns exec "$ns" sh -e -c "
    ip addr add $net.1.2/24 dev p$ns; ip link set p$ns up; ip link set lo up
    ip route add default via $net.1.1"
  if [ -n "$delay" ]; then
    ip netns exec "$router" ip tuntap add dev "d$ns" mode tun
    ip netns exec "$router" python3 "$(dirname "${BASH_SOURCE[0]}")/delayline.py" "d$ns" "$delay" & DELAYLINE_PID=$!
    ip netns exec "$router" sh -e -c "
      for conf in all default d$ns b$ns; do sysctl -q -w net.ipv4.conf.\$conf.rp_filter=0; done
      ip link set d$ns up
      ip route add default dev d$ns table 100
      ip rule add iif b$ns lookup 100"
  fi
}

# ps_publish ORIGIN BUILD ID DELTA_SOURCES [ARGS…]: publishes with $BIN/patchsync and the key in $WORK/keys;
# prints the seconds it took.
ps_publish() {
  local origin=$1 build=$2 id=$3 sources=$4 t0 t1; shift 4
  t0=$(date +%s.%N)
  "$BIN/patchsync" publish "$build" --origin "$origin" --build-id "$id" --targets-key "$WORK/keys/targets.key" --online-key "$WORK/keys/online.key" \
    --delta-sources "$sources" "$@" >/dev/null 2>"$WORK/publish.err" || { cat "$WORK/publish.err" >&2; exit 1; }
  t1=$(date +%s.%N); echo "scale=1; ($t1 - $t0) / 1" | bc
}

# served_since OFFSET PREFIX: "bytes requests" that nginx's access log ($NGINX_ACCESS_LOG) records after
# byte OFFSET for URIs under PREFIX.
served_since() {
  tail -c +"$(( $1 + 1 ))" "$NGINX_ACCESS_LOG" | awk -v p="$2" 'index($1, p) == 1 { b += $3; n++ } END { printf "%.0f %d\n", b, n }'
}

# need_tools TOOL…: installs, from Debian, the packages of the same names whose commands are missing.
need_tools() {
  local need="" tool
  for tool in "$@"; do command -v "$tool" >/dev/null || need="$need $tool"; done
  [ -z "$need" ] && return 0
  echo "installing:$need" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need >/dev/null
}

# pair_builds PAIR: sets OLD_NAME OLD NEW_NAME NEW from Benchmarks/datasets.sh (fetching them once), and
# BIN to $PATCHSYNC_BIN_DIR (a copy, to keep building meanwhile) or the release build, built if missing.
pair_builds() {
  read -r OLD_NAME OLD NEW_NAME NEW <<<"$(bash Benchmarks/datasets.sh "$1" | awk '{printf "%s %s ", $1, $2}')"
  BIN=${PATCHSYNC_BIN_DIR:-$(pwd)/.build/release}
  [ -x "$BIN/patchsync" ] || make release >/dev/null
}
