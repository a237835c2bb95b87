# free_port: prints a loopback TCP port nothing listens on (one that refuses a
# connection), for the scripts that start servers; sourced by scripts/bench-judges and
# scripts/check-server-agreement.
free_port() {
  local p
  for _ in $(seq 1 200); do
    p=$((20000 + RANDOM % 40000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return 0; fi
  done
  echo "error: no free loopback port found" >&2
  return 1
}
