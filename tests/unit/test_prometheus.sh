#!/usr/bin/env bash
# test_prometheus.sh COHORTRUN FMNIST_TRAIN: a real Prometheus server (Debian's prometheus) scrapes cohortrun
# --metrics-port every second during a 2-rank training run; its query API must then give, for both ranks, steps that
# grew from scrape to scrape, allreduce bytes and seconds, the loss, and cohortrun's own ranks_running of 2.
# Skipped (77), with the reason, only where prometheus is not installed.
set -u
COHORTRUN=$1 FT=$2
PROM=$(command -v prometheus || true)
[ -n "$PROM" ] || { echo "SKIP: prometheus is not installed (apt-get install prometheus)"; exit 77; }
W=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$W"; }
trap cleanup EXIT
fail() { echo "FAIL [prometheus]: $*"; echo "--- cohortrun:"; tail -5 "$W/run.log"; echo "--- prometheus:"; tail -5 "$W/prom.log"; exit 1; }
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
MP=$(free_port) PP=$(free_port)

cat >"$W/prometheus.yml" <<YML
global: {scrape_interval: 1s, scrape_timeout: 900ms}
scrape_configs:
  - job_name: cohort
    static_configs: [{targets: ["127.0.0.1:$MP"]}]
YML
"$PROM" --config.file="$W/prometheus.yml" --storage.tsdb.path="$W/tsdb" --web.listen-address="127.0.0.1:$PP" \
  >"$W/prom.log" 2>&1 &
pids+=($!)
# 600 steps: the run must outlast several scrapes once both ranks serve metrics; 200 took 4.5 s on a 2-vCPU Xeon
# (2026-11-27), where Prometheus first held both ranks at step 184 and never saw the count grow.
"$COHORTRUN" -np 2 --metrics-port "127.0.0.1:$MP" "$FT" --steps 600 --batch 32 --quiet >"$W/run.log" 2>&1 &
run=$!
pids+=($run)
grep -q "live metrics at http://127.0.0.1:$MP/metrics" <(sleep 3; cat "$W/run.log") ||
  fail "cohortrun did not say where its metrics are"

query() { # PromQL -> "rank value" lines (or "value" for series without a rank)
  /usr/bin/python3 - "$PP" "$1" <<'PY'
import json, sys, urllib.parse, urllib.request
url = f"http://127.0.0.1:{sys.argv[1]}/api/v1/query?query=" + urllib.parse.quote(sys.argv[2])
try:
    data = json.load(urllib.request.urlopen(url, timeout=5))
except Exception as e:
    print(f"error {e}"); sys.exit(0)
for r in data.get("data", {}).get("result", []):
    print(r["metric"].get("rank", "-"), r["value"][1])
PY
}
# While the job runs: both ranks' steps appear and grow.
first=""
for _ in $(seq 1 90); do
  now=$(query 'cohort_steps_total' | sort)
  [ -z "$first" ] && [ "$(echo "$now" | grep -c '^[01] ')" -eq 2 ] && first=$now
  [ -n "$first" ] && [ "$now" != "$first" ] && break
  kill -0 $run 2>/dev/null || break
  sleep 1
done
[ -n "$first" ] || fail "Prometheus never had cohort_steps_total for both ranks"
echo "ok   scraped while training: $(echo $first | tr '\n' ' ')"
wait $run || fail "the training run failed"
sleep 1
grow=$(query 'increase(cohort_steps_total[5m]) > 0' | wc -l)
[ "$grow" -eq 2 ] || fail "steps did not grow between scrapes for both ranks ($grow series)"
for m in cohort_allreduce_bytes_total cohort_allreduce_seconds_total cohort_compute_seconds_total cohort_loss \
  cohort_img_per_second; do
  n=$(query "max_over_time(${m}[5m]) > 0" | grep -c '^[01] ')
  [ "$n" -eq 2 ] || fail "$m: $n ranks with a value > 0 in Prometheus"
done
n=$(query 'max_over_time(cohort_stalls_total[5m]) >= 0' | grep -c '^[01] ')
[ "$n" -eq 2 ] || fail "cohort_stalls_total: $n ranks in Prometheus"
running=$(query 'max_over_time(cohortrun_ranks_running[5m])' | awk '{print $2}')
[ "$running" = 2 ] || fail "cohortrun_ranks_running peaked at '$running', expected 2"
echo "ok   Prometheus holds both ranks' steps, bytes, seconds, loss and img/s, and cohortrun's 2 ranks running"
