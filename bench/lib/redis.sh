# Sourced by the bench scripts that need one throwaway redis-server.
# start_redis: starts it on a free loopback port without persistence, sets
# $port, stops it and removes its folder on exit, and waits until it answers.
command -v redis-server >/dev/null || { echo "install: apt-get install -y redis-server redis-tools" >&2; exit 1; }

start_redis() {
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  redis_dir=$(mktemp -d)
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$redis_dir" \
    --daemonize no --logfile "$redis_dir/log" &
  redis_pid=$!
  trap 'kill $redis_pid 2>/dev/null; rm -rf "$redis_dir"' EXIT
  for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && return; sleep 0.1; done
  echo "redis-server did not answer on port $port (log: $redis_dir/log)" >&2
  exit 1
}
