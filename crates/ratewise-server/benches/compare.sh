#!/usr/bin/env bash
# Throughput and latency of rate-limit services on this machine, same run,
# interleaved rounds: the floor (a tonic server that answers OK at once),
# ratewise-server in memory and on Redis, and — when their binaries are
# given — Limitador in memory and on Redis. Every service gets the same load
# from the `rls_load` example: closed loop, CONNECTIONS connections,
# IN_FLIGHT calls in flight, one descriptor per call, KEYS distinct values.
#
#   cargo build --release -p ratewise-server --bins --examples
#   LIMITADOR=/path/to/limitador-server ROUNDS=3 DURATION=5 \
#     crates/ratewise-server/benches/compare.sh > results.jsonl
#
# OTHER=/path/to/another/ratewise-server adds that build's rows
# ("other-memory", "other-redis") to the same rounds: an A/B of two builds
# under the same load and noise.
#
# Needs redis-server for the Redis rows. Prints one JSON object per
# measurement (the load generator's, plus "service", "round" and the CPU
# seconds the service and Redis used during it: "service_cpu_s",
# "redis_cpu_s").
set -euo pipefail
cd "$(dirname "$0")/../../.."
BIN=${BIN:-target/release}
ROUNDS=${ROUNDS:-3}
SECONDS_EACH=${DURATION:-5}
CONNECTIONS=${CONNECTIONS:-4}
IN_FLIGHT=${IN_FLIGHT:-64}
KEYS_LIST=${KEYS_LIST:-"1 10000"}
RATE=${RATE:-}
# Worker threads of every service's async runtime (tokio reads
# TOKIO_WORKER_THREADS); unset, each uses one per core.
SERVICE_THREADS=${SERVICE_THREADS:-}
WORK=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT

cat > "$WORK/ratewise.yaml" <<'EOF'
domain: bench
descriptors:
  - key: user
    rate_limit: { unit: second, requests_per_unit: 1000000000 }
EOF
cat > "$WORK/limitador.yaml" <<'EOF'
- namespace: bench
  max_value: 1000000000
  seconds: 1
  conditions: []
  variables: ["descriptors[0].user"]
EOF

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 1 300); do (echo > "/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done; echo "port $1 never opened" >&2; return 1; }

REDIS_PORT=$(free_port)
redis-server --port "$REDIS_PORT" --save '' --appendonly no > "$WORK/redis.log" 2>&1 &
REDIS_PID=$!
wait_port "$REDIS_PORT"

# CPU time a process has used, in clock ticks (Linux; 0 elsewhere), and
# ticks as seconds: each measurement reports the service's and Redis's CPU
# over its run, so a per-call cost can be read beside the throughput.
TICKS=$(getconf CLK_TCK 2>/dev/null || echo 100)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
cpu_s() { awk -v t="$1" -v hz="$TICKS" 'BEGIN { printf "%.2f", t / hz }'; }

start() { # name -> sets PID and PORT
  local name=$1; PORT=$(free_port); local http; http=$(free_port)
  if [ -n "$SERVICE_THREADS" ]; then export TOKIO_WORKER_THREADS=$SERVICE_THREADS; fi
  case $name in
    floor) "$BIN/examples/rls_floor" "127.0.0.1:$PORT" > /dev/null 2>&1 & ;;
    ratewise-memory) "$BIN/ratewise-server" --config "$WORK/ratewise.yaml" --grpc "127.0.0.1:$PORT" --http "127.0.0.1:$http" --log warn > /dev/null 2>&1 & ;;
    ratewise-redis) "$BIN/ratewise-server" --config "$WORK/ratewise.yaml" --grpc "127.0.0.1:$PORT" --http "127.0.0.1:$http" --log warn --redis "redis://127.0.0.1:$REDIS_PORT" --store-deadline 1s > /dev/null 2>&1 & ;;
    other-memory) "$OTHER" --config "$WORK/ratewise.yaml" --grpc "127.0.0.1:$PORT" --http "127.0.0.1:$http" --log warn > /dev/null 2>&1 & ;;
    other-redis) "$OTHER" --config "$WORK/ratewise.yaml" --grpc "127.0.0.1:$PORT" --http "127.0.0.1:$http" --log warn --redis "redis://127.0.0.1:$REDIS_PORT" --store-deadline 1s > /dev/null 2>&1 & ;;
    limitador-memory) "$LIMITADOR" --rls-ip 127.0.0.1 --rls-port "$PORT" --http-ip 127.0.0.1 --http-port "$http" "$WORK/limitador.yaml" memory > /dev/null 2>&1 & ;;
    limitador-redis) "$LIMITADOR" --rls-ip 127.0.0.1 --rls-port "$PORT" --http-ip 127.0.0.1 --http-port "$http" "$WORK/limitador.yaml" redis "redis://127.0.0.1:$REDIS_PORT" > /dev/null 2>&1 & ;;
  esac
  PID=$!
  unset TOKIO_WORKER_THREADS
  wait_port "$PORT"
}

SERVICES="floor ratewise-memory ratewise-redis"
if [ -n "${OTHER:-}" ]; then SERVICES="$SERVICES other-memory other-redis"; fi
if [ -n "${LIMITADOR:-}" ]; then SERVICES="$SERVICES limitador-memory limitador-redis"; fi

for round in $(seq 1 "$ROUNDS"); do
  for keys in $KEYS_LIST; do
    # Rotate the order each round so no service always runs first.
    read -r -a list <<< "$SERVICES"
    n=${#list[@]}
    ORDER=()
    for i in $(seq 0 $((n - 1))); do ORDER+=("${list[$(( (i + round - 1) % n ))]}"); done
    for svc in "${ORDER[@]}"; do
      start "$svc"
      svc0=$(cpu_ticks "$PID"); redis0=$(cpu_ticks "$REDIS_PID")
      out=$("$BIN/examples/rls_load" --target "127.0.0.1:$PORT" --seconds "$SECONDS_EACH" \
        --connections "$CONNECTIONS" --in-flight "$IN_FLIGHT" --keys "$keys" --domain bench --key user \
        ${RATE:+--rate "$RATE"} --json)
      svc_cpu=$(( $(cpu_ticks "$PID") - svc0 )); redis_cpu=$(( $(cpu_ticks "$REDIS_PID") - redis0 ))
      echo "{\"service\":\"$svc\",\"round\":$round,\"service_cpu_s\":$(cpu_s "$svc_cpu"),\"redis_cpu_s\":$(cpu_s "$redis_cpu"),${out#\{}"
      kill "$PID"; wait "$PID" 2>/dev/null || true
      redis-cli -p "$REDIS_PORT" flushall > /dev/null
    done
  done
done
