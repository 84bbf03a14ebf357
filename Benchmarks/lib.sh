# Shared by the benchmarks (sourced): one nginx origin, and a rate-limited link in a network namespace.

# start_nginx: serves $WORK/www on a free loopback port; sets PORT and NGINX_PID once it answers.
start_nginx() {
  PORT=$(python3 -c "import socket; s=socket.socket(); s.bind(('',0)); print(s.getsockname()[1])")
  mkdir -p "$WORK/nginx/tmp"
  cat > "$WORK/nginx/nginx.conf" <<CONF
daemon off; user root root; worker_processes 2; pid $WORK/nginx/pid; error_log $WORK/nginx/error.log warn;
events { worker_connections 1024; }
http { access_log off; sendfile on; keepalive_requests 100000; client_body_temp_path $WORK/nginx/tmp;
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
