# A command's resident host memory over its judgments, sourced by scripts/gpu-check,
# scripts/bench-judge-memory and scripts/bench-long-run: run a command while sampling
# its resident memory and how many judgments its cache file holds, and summarise the
# samples. Samples are CSV lines: seconds, judgments done, resident kB.

# sample_run CSV CACHE KILL_AT COMMAND...: runs COMMAND, writing a sample every
# ${SAMPLE_EVERY:-0.2} seconds to CSV; kills it with SIGKILL once CACHE holds KILL_AT
# judgments (empty: never). Returns the command's status (137 when killed).
sample_run() {
  local csv=$1 cache=$2 kill_at=$3 start=$EPOCHREALTIME pid rss judged status=0
  shift 3
  : > "$csv"
  "$@" &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    rss=$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status" 2>/dev/null || true)
    judged=0
    if [ -f "$cache" ]; then judged=$(wc -l < "$cache"); fi
    if [ -n "$rss" ]; then
      awk -v a="$start" -v b="$EPOCHREALTIME" -v n="$judged" -v r="$rss" 'BEGIN {printf "%.2f,%d,%d\n", b - a, n, r}' >> "$csv"
    fi
    if [ -n "$kill_at" ] && [ "$judged" -ge "$kill_at" ]; then kill -9 "$pid" 2>/dev/null || true; break; fi
    sleep "${SAMPLE_EVERY:-0.2}"
  done
  wait "$pid" 2>/dev/null || status=$?
  return "$status"
}

# rss_summary CSV [BEFORE]: over the samples past BEFORE judgments (default 0), prints
# "kB after the first judgment, kB at the last, kB per judgment over the second half of
# the judgments, judgments"; prints nothing before any judgment.
rss_summary() {
  awk -F, -v before="${2:-0}" '
    $2 > before { n++; own[n] = $2 - before; rss[n] = $3; if (own[n] > top || (own[n] == top && $3 > top_rss)) { top = own[n]; top_rss = $3 } }
    END {
      if (!n) exit
      for (h = 1; own[h] < int(top / 2); h++) {}
      d = top - own[h]
      printf "%d %d %.3f %d\n", rss[1], top_rss, (top_rss - rss[h]) / (d > 1 ? d : 1), top
    }' "$1"
}
