#!/usr/bin/env bash
# Benchmarks ccrun-rendezvous against torch's own TCPStore server, in one
# run, with one load generator (build/tests/store_bench, speaking the
# dialect of that torch, which ccrun's server speaks too). Writes a Markdown
# table to stdout and into docs/benchmarks.md between the bench-store markers
# (the docs table only for the machine's own torch: other runs print).
#
#   scripts/bench-store.sh            # full matrix (a few minutes)
#   scripts/bench-store.sh --smoke    # smallest sizes, < 30 s, for CI
#
# The peer is the torch of TORCH_PYTHON (default: Debian's /usr/bin/python3,
# torch 1.13, the old server). The strongest peer is torch >= 2.4's libuv
# server (its default): where a torch 2.x exists, run
#   TORCH_PYTHON=/path/to/python3 SERVER_CPUS=0 LOAD_CPUS=1-15 scripts/bench-store.sh
# SERVER_CPUS / LOAD_CPUS pin each server and the load generator to those
# CPUs (taskset -c), so that they do not share cores.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/bench_common.sh" "$@"  # here, build, python, smoke

cmake --build "$build" --target store_bench ccrun-rendezvous >/dev/null
bench_bin=$build/tests/store_bench
bench() { "${pin_load[@]}" "$bench_bin" "${dialect[@]}" "$@"; }
python=${TORCH_PYTHON:-${CCRUN_TEST_PYTHON:-/usr/bin/python3}}
torch_version=$("$python" -c 'import torch; print(torch.__version__.split("+")[0])')
dialect=()
peer="torch $torch_version TCPStore"
if [[ ${torch_version%%.*} -ge 2 ]]; then
  dialect=(--torch2)
  minor=${torch_version#*.}; minor=${minor%%.*}
  ((minor >= 4)) && peer="torch $torch_version TCPStore (libuv)"
fi
# Prefixes that pin a command to SERVER_CPUS / LOAD_CPUS (taskset execs the
# command: $! stays the server's own pid, so cleanup() reaches it).
pin_server=(); [[ -n ${SERVER_CPUS:-} ]] && pin_server=(taskset -c "$SERVER_CPUS")
pin_load=(); [[ -n ${LOAD_CPUS:-} ]] && pin_load=(taskset -c "$LOAD_CPUS")
own_torch=$([[ $python == "${CCRUN_TEST_PYTHON:-/usr/bin/python3}" && -z ${SERVER_CPUS:-}${LOAD_CPUS:-} ]] && echo 1 || echo 0)

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap 'cleanup; rm -rf "$tmp"' EXIT

"${pin_server[@]}" "$build/store/ccrun-rendezvous" --port 0 --log-level warn >"$tmp/ccrun.out" 2>&1 &
pids+=($!); ccrun_pid=$!
"${pin_server[@]}" "$python" "$here/scripts/torch_store_server.py" >"$tmp/torch.out" 2>&1 &
pids+=($!); torch_pid=$!
for _ in $(seq 100); do
  grep -q listening "$tmp/ccrun.out" && grep -q '^port' "$tmp/torch.out" && break
  sleep 0.1
done
ccrun_port=$(sed -n 's/.*listening on .*:\([0-9]*\)$/\1/p' "$tmp/ccrun.out")
torch_port=$(awk '/^port/{print $2}' "$tmp/torch.out")
[[ -n $ccrun_port && -n $torch_port ]] || { echo "bench-store: a server did not start" >&2; cat "$tmp"/*.out >&2; exit 1; }

rss_kib() { awk '/VmRSS/{print $2}' "/proc/$1/status"; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

if ((smoke)); then
  clients=(1); barriers=(256); secs=0.5
else
  clients=(1 16 256); barriers=(256 1024 4096 8192 16384); secs=3
fi

value() { sed -n "s/.*\"$2\":\([0-9.]*\).*/\1/p" <<<"$1"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{ if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }

table="| measurement | ccrun-rendezvous | $peer | ratio |
|---|---|---|---|"
hz=$(getconf CLK_TCK)
# Server CPU per request: what a server costs, whoever saturates the cores
# (here the load generator and the server share two).
us_per_op() { awk -v t="$1" -v hz="$hz" -v ops="$2" 'BEGIN{ if (ops > 0) printf "%.2f", t / hz * 1e6 / ops; else print "n/a" }'; }
# The load generator's own CPU per request bounds what any server can show
# here: with both CPU-bound on the same cores, a server costing nothing would
# reach at most cores / generator-CPU-per-request.
gen_us() { awk -v ops="$2" '{ if (ops > 0) printf "%.2f", ($1 + $2) * 1e6 / ops; else print "n/a" }' "$1"; }
cores=$(nproc)
for c in "${clients[@]}"; do
  t0=$(cpu_ticks "$ccrun_pid")
  a=$(/usr/bin/time -o "$tmp/gen-a" -f "%U %S" "${pin_load[@]}" "$bench_bin" "${dialect[@]}" --port "$ccrun_port" throughput --clients "$c" --seconds "$secs")
  ta=$(( $(cpu_ticks "$ccrun_pid") - t0 ))
  t0=$(cpu_ticks "$torch_pid")
  b=$(/usr/bin/time -o "$tmp/gen-b" -f "%U %S" "${pin_load[@]}" "$bench_bin" "${dialect[@]}" --port "$torch_port" throughput --clients "$c" --seconds "$secs")
  tb=$(( $(cpu_ticks "$torch_pid") - t0 ))
  ua=$(us_per_op "$ta" "$(value "$a" ops)"); ub=$(us_per_op "$tb" "$(value "$b" ops)")
  ga=$(gen_us "$tmp/gen-a" "$(value "$a" ops)"); gb=$(gen_us "$tmp/gen-b" "$(value "$b" ops)")
  a=$(value "$a" ops_per_s); b=$(value "$b" ops_per_s)
  table+=$'\n'"| set/get/add, $c client(s), ops/s | $a | $b | $(ratio "$a" "$b")x |"
  table+=$'\n'"| set/get/add, $c client(s), server CPU us per request | $ua | $ub | $(ratio "$ub" "$ua")x less |"
  table+=$'\n'"| set/get/add, $c client(s), load generator CPU us per request | $ga | $gb | |"
  if ((c > 1)); then
    bound=$(awk -v g="$gb" -v n="$cores" 'BEGIN{ if (g > 0) printf "%.0f", n * 1e6 / g; else print "n/a" }')
    table+=$'\n'"| set/get/add, $c client(s), ops/s of a server costing nothing ($cores cores / generator CPU) | $bound | | $(ratio "$bound" "$b")x (the most any server can show here) |"
  fi
done
for n in "${barriers[@]}"; do
  a=$(bench --port "$ccrun_port" barrier --clients "$n")
  a=$(value "$a" seconds)
  if b=$(timeout 60 "${pin_load[@]}" "$bench_bin" "${dialect[@]}" --port "$torch_port" barrier --clients "$n"); then
    b=$(value "$b" seconds); r="$(ratio "$b" "$a")x faster"
  else
    b="> 60 (cut off)"; r="n/a"
  fi
  table+=$'\n'"| barrier of $n clients, seconds | $a | $b | $r |"
done
idle=$(rss_kib "$ccrun_pid")
table+=$'\n'"| ccrun-rendezvous RSS idle (after the runs above), KiB | $idle | | |"
if ((!smoke)); then
  bench --port "$ccrun_port" hold --clients 8192 --seconds 3 >"$tmp/hold.out" &
  hold=$!
  for _ in $(seq 100); do grep -q ready "$tmp/hold.out" 2>/dev/null && break; sleep 0.1; done
  sleep 0.5
  table+=$'\n'"| ccrun-rendezvous RSS with 8192 connections, KiB | $(rss_kib "$ccrun_pid") | | |"
  wait "$hold"
fi

echo "$table"
if ((!smoke && own_torch)); then
  section="Measured by \`scripts/bench-store.sh\` on $(date -u +%Y-%m-%d), $(nproc) cores; the load generator
(one thread) and the server under test share the machine.

$table"
  python3 "$here/scripts/write_bench_section.py" "$here/docs/benchmarks.md" bench-store Store "$section"
fi
plot_section bench-store "$table" $((!smoke && own_torch))
