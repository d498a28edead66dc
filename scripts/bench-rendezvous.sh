#!/usr/bin/env bash
# Rendezvous time of N agents (plain processes on loopback, one
# ccrun-rendezvous daemon; and the same agents with --rdzv-backend etcd on a
# one-member etcd this script starts, skipped with a note when /usr/bin/etcd
# is missing), side by side with torchrun's c10d rendezvous
# (Debian's torch 1.13 through scripts/torchrun_patched.py), in one run; and
# the time from an agent's death to the survivors' restarted workers running
# at the default keep-alive settings; and the store traffic of an N-agent
# rendezvous (add a counter, set a key, wait for all N keys; N client threads)
# through a one-member etcd beside the same through ccrun-rendezvous
# (tests/tools/store_rendezvous_bench.cpp). Table to stdout and
# docs/benchmarks.md.
#
#   scripts/bench-rendezvous.sh          # 2, 8, 32, 64 agents
#   scripts/bench-rendezvous.sh --smoke  # 2 agents, for CI
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/bench_common.sh" "$@"  # here, build, python, smoke
cmake --build "$build" --target ccrun ccrun-rendezvous store_rendezvous_bench >/dev/null
ccrun=$build/launcher/ccrun
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT

if ((smoke)); then sizes=(2); torch_max=2; else sizes=(2 8 32 64); torch_max=32; fi

"$build/store/ccrun-rendezvous" --port 0 --log-level warn >"$tmp/daemon.out" 2>&1 &
pids+=($!)
disown  # killed at exit; no job notice
for _ in $(seq 100); do grep -qs listening "$tmp/daemon.out" && break; sleep 0.05; done
port=$(sed -n 's/.*listening on .*:\([0-9]*\)$/\1/p' "$tmp/daemon.out")

free_port() { "$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# One etcd member (data directory on this disk, loopback ports) for the
# etcd rows; without /usr/bin/etcd (or $ETCD_BINARY) those rows say why
# they were not run.
have_etcd=0
etcd=${ETCD_BINARY:-/usr/bin/etcd}
etcd_note="etcd: not run ($etcd missing; install etcd-server)"
if [[ -x $etcd ]]; then
  eport=$(free_port); epeer=$(free_port)
  "$etcd" --data-dir "$tmp/etcd" --listen-client-urls "http://127.0.0.1:$eport" \
    --advertise-client-urls "http://127.0.0.1:$eport" --listen-peer-urls "http://127.0.0.1:$epeer" \
    --initial-advertise-peer-urls "http://127.0.0.1:$epeer" \
    --initial-cluster "default=http://127.0.0.1:$epeer" >"$tmp/etcd.log" 2>&1 &
  pids+=($!)
  disown
  for _ in $(seq 200); do grep -qs "ready to serve client requests" "$tmp/etcd.log" && break; sleep 0.05; done
  if grep -qs "ready to serve client requests" "$tmp/etcd.log"; then
    have_etcd=1
    etcd_note="etcd $("$etcd" --version | sed -n 's/etcd Version: //p'), one member, data directory on local disk"
  else
    etcd_note="etcd: not run ($etcd did not become ready: $(tail -1 "$tmp/etcd.log"))"
  fi
fi

# Each worker writes the time it starts into $OUT/<rank>.
worker='date +%s%N > "$OUT/$RANK"'

# rendezvous_ms LAUNCHER... : starts n agents, returns ms from the last
# agent's start to the last worker's start (every agent knows its ranks).
rendezvous_ms() {
  local n=$1; shift
  local out=$tmp/run; rm -rf "$out"; mkdir -p "$out"
  local agents=() last=0
  for i in $(seq "$n"); do
    ((i == n)) && last=$(date +%s%N)
    OUT=$out "$@" >/dev/null 2>>"$tmp/agents.err" &
    agents+=($!)
  done
  local ok=1
  for a in "${agents[@]}"; do wait "$a" || ok=0; done
  if ((!ok)) || (($(ls "$out" | wc -l) != n)); then echo "failed"; return; fi
  local done_ns
  done_ns=$(cat "$out"/* | sort -n | tail -1)
  awk -v a="$done_ns" -v b="$last" 'BEGIN{printf "%.0f", (a - b) / 1e6}'
}

# median3 CMD...: the middle of three runs of CMD (a function that runs one
# rendezvous under a fresh run id); "failed" when any failed.
median3() {
  local runs=() r
  for _ in 1 2 3; do r=$("$@"); [[ $r == failed ]] && { echo failed; return; }; runs+=("$r"); done
  printf '%s\n' "${runs[@]}" | sort -n | sed -n 2p
}
ccrun_c10d() {
  rendezvous_ms "$1" "$ccrun" --nnodes "$1" --nproc-per-node 1 --rdzv-backend c10d \
    --rdzv-endpoint "127.0.0.1:$port" --rdzv-id "bench-$1-$RANDOM" --rdzv-conf is_host=0 \
    --no-python /bin/sh -c "$worker"
}
ccrun_etcd() {
  rendezvous_ms "$1" "$ccrun" --nnodes "$1" --nproc-per-node 1 --rdzv-backend etcd \
    --rdzv-endpoint "127.0.0.1:$eport" --rdzv-id "bench-$1-$RANDOM" --no-python /bin/sh -c "$worker"
}

load=$(cut -d' ' -f1-3 /proc/loadavg)
table="| measurement | ccrun (ccrun-rendezvous) | ccrun (etcd backend, one member) | torchrun c10d (torch 1.13) | ratio ccrun-rendezvous / torchrun |
|---|---|---|---|---|"
for n in "${sizes[@]}"; do
  c=$(median3 ccrun_c10d "$n")
  if ((have_etcd)); then
    e=$(median3 ccrun_etcd "$n")
  else
    e="not run (no etcd)"
  fi
  if ((n <= torch_max)); then
    tport=$(free_port)
    t=$(rendezvous_ms "$n" "$python" "$here/scripts/torchrun_patched.py" --nnodes "$n" \
          --nproc_per_node 1 --rdzv_backend c10d --rdzv_endpoint "127.0.0.1:$tport" \
          --rdzv_id "bench-$n" --no_python /bin/sh -c "$worker")
    r=$(awk -v a="$t" -v b="$c" 'BEGIN{ if (b > 0 && a + 0 == a) printf "%.1fx faster", a / b; else print "n/a" }')
  else
    t="not run (each torchrun agent is a ~240 MB Python process)"; r="n/a"
  fi
  table+=$'\n'"| rendezvous of $n agents, ms (last agent start to all ranks known; ccrun: median of 3) | $c | $e | $t | $r |"
done

# Agent death to restarted workers, default keep-alive (5 s x 3), 3 agents
# of an elastic 2:3 job; one agent is SIGKILLed once all workers run.
if ((!smoke)); then
  out=$tmp/death; mkdir -p "$out"
  dworker='date +%s%N >> "$OUT/attempt_$TORCHELASTIC_RESTART_COUNT"; sleep 300'
  id="death-$RANDOM"
  agents=()
  for i in 1 2 3; do
    OUT=$out "$ccrun" --nnodes 2:3 --nproc-per-node 1 --rdzv-backend c10d \
      --rdzv-endpoint "127.0.0.1:$port" --rdzv-id "$id" --max-restarts 1 \
      --rdzv-conf is_host=0 --stop-grace 2 --no-python /bin/sh -c "$dworker" >/dev/null 2>&1 &
    agents+=($!); pids+=($!)
    disown
  done
  for _ in $(seq 600); do [[ -f $out/attempt_0 && $(wc -l <"$out/attempt_0") -ge 3 ]] && break; sleep 0.1; done
  kill -9 "${agents[2]}"
  killed=$(date +%s%N)
  for _ in $(seq 900); do [[ -f $out/attempt_1 && $(wc -l <"$out/attempt_1") -ge 2 ]] && break; sleep 0.1; done
  if [[ -f $out/attempt_1 ]]; then
    d=$(awk -v a="$(sort -n "$out/attempt_1" | head -1)" -v b="$killed" 'BEGIN{printf "%.0f", (a - b) / 1e6}')
  else
    d="failed"
  fi
  kill -9 "${agents[0]}" "${agents[1]}" 2>/dev/null || true
  table+=$'\n'"| agent SIGKILLed to survivors' restarted workers running, ms (keep-alive 5 s x 3) | $d | | | |"
fi
# The store traffic of one rendezvous, etcd (one member, data on this disk)
# beside ccrun-rendezvous, through the same client code (open_store).
stable=""
if ((have_etcd)); then
  median() { "$build/tests/store_rendezvous_bench" --address "$1" --clients "$2" --rounds 5 2>/dev/null |
             sed -n 's/.*"median_ms": \([0-9.]*\).*/\1/p'; }
  stable="| store traffic of an N-agent rendezvous, ms (add, set, wait for all N keys; median of 5) | ccrun-rendezvous (tcp://) | etcd, one member (etcd://) |
|---|---|---|"
  for n in "${sizes[@]}"; do
    e=$(median "etcd://127.0.0.1:$eport/bench" "$n"); e=${e:-failed}
    c=$(median "tcp://127.0.0.1:$port" "$n"); c=${c:-failed}
    stable+=$'\n'"| $n agents | $c | $e |"
  done
fi

echo "$table"
echo
echo "${stable:-$etcd_note}"
if ((!smoke)); then
  section="Measured by \`scripts/bench-rendezvous.sh\` on $(date -u +%Y-%m-%d), $(nproc) cores (load average
$load when it started); every agent
is a process on this machine, talking over loopback (ccrun: to one ccrun-rendezvous daemon, or
with \`--rdzv-backend etcd\` to $etcd_note; torchrun: its c10d backend, the first agent hosting
the store). The store-traffic rows time N client threads of \`store_rendezvous_bench\` (each its
own store client) against the same daemon and the same etcd.

$table

$stable"
  python3 "$here/scripts/write_bench_section.py" "$here/docs/benchmarks.md" bench-rendezvous Rendezvous "$section"
fi
plot_section bench-rendezvous "$table" $((!smoke))
