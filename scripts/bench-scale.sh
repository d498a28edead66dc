#!/usr/bin/env bash
# The rendezvous at scale: N agents' real rendezvous and heartbeat code as
# threads of one process (tests/tools/rdzv_scale_sim.cpp) against one
# ccrun-rendezvous over loopback TCP, for N up to what this machine's open-file
# limit allows (each agent holds 2 connections, so does the daemon for it);
# the same against a one-member etcd at N = 100; and torch 1.13's c10d
# rendezvous (its DynamicRendezvousHandler, as threads, scripts/bench_scale_torch.py)
# against the same daemon at the largest N it forms here in reasonable time.
# Table to stdout and docs/benchmarks.md.
#
#   scripts/bench-scale.sh          # N = 100, 1000 and the largest the limit allows (<= 10000)
#   scripts/bench-scale.sh --smoke  # N = 20 at a 0.5 s keep-alive, for CI
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/bench_common.sh" "$@"  # here, build, python, smoke
cmake --build "$build" --target ccrun-rendezvous rdzv_scale_sim >/dev/null
sim=$build/tests/rdzv_scale_sim
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT

ulimit -n "$(ulimit -Hn)"
fd_limit=$(ulimit -n)
largest=$(( (fd_limit - 200) / 2 / 1000 * 1000 ))
((largest > 10000)) && largest=10000
if ((smoke)); then
  sizes=(20); keep_alive=0.5; steady=1; torch_sizes=(4); etcd_n=0; watch_sizes=(4)
else
  sizes=(100 1000 "$largest"); keep_alive=5; steady=10; torch_sizes=(16 64); etcd_n=100
  watch_sizes=(4 16)
fi

# start_daemon: a fresh ccrun-rendezvous on a free port; sets dport, dpid.
starts=0
start_daemon() {
  local out=$tmp/daemon-$((++starts)).out  # its own file: the shell truncates it after the fork
  "$build/store/ccrun-rendezvous" --host 127.0.0.1 --port 0 --log-level warn >"$out" 2>&1 &
  dpid=$!; pids+=($dpid)
  disown
  for _ in $(seq 100); do grep -qs listening "$out" && break; sleep 0.05; done
  dport=$(sed -n 's/.*listening on .*:\([0-9]*\)$/\1/p' "$out")
}
stop_daemon() { kill -9 "$dpid" 2>/dev/null || true; }

# field JSON NAME: one number of the simulation's output, rounded for the table.
field() { "$python" -c 'import json,sys; j=json.loads(sys.argv[1]); v=j
for k in sys.argv[2].split("."): v=v[k]
print(f"{v:.3g}" if isinstance(v, float) else v)' "$1" "$2"; }

load=$(cut -d' ' -f1-3 /proc/loadavg)
table="| agents (N) | store | form a round, s | restart round after a death, s | detect a silent agent, s (bound) | requests per node per interval | payload bytes per node per s | daemon CPU, % of a core | daemon RSS, MiB |
|---|---|---|---|---|---|---|---|---|"
row() {  # row N STORE-NAME JSON
  local j=$3
  table+=$'\n'"| $1 | $2 | $(field "$j" form_s) | $(field "$j" restart_s) | $(field "$j" detect_s) ($(field "$j" detect_bound_s)) | $(field "$j" steady.requests_per_node_per_interval) | $(field "$j" steady.bytes_per_node_per_s) | ${4:-$(field "$j" steady.daemon_cpu_percent)} | ${5:-$(field "$j" daemon_rss_mib)} |"
}
for n in "${sizes[@]}"; do
  start_daemon
  j=$("$sim" --store "tcp://127.0.0.1:$dport" --nodes "$n" --keep-alive "$keep_alive" \
        --steady "$steady" --daemon-pid "$dpid")
  stop_daemon
  row "$n" "ccrun-rendezvous" "$j"
done

etcd_note=""
etcd=${ETCD_BINARY:-/usr/bin/etcd}
if ((etcd_n > 0)) && [[ -x $etcd ]]; then
  free_port() { "$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
  eport=$(free_port); epeer=$(free_port)
  "$etcd" --data-dir "$tmp/etcd" --listen-client-urls "http://127.0.0.1:$eport" \
    --advertise-client-urls "http://127.0.0.1:$eport" --listen-peer-urls "http://127.0.0.1:$epeer" \
    --initial-advertise-peer-urls "http://127.0.0.1:$epeer" \
    --initial-cluster "default=http://127.0.0.1:$epeer" >"$tmp/etcd.log" 2>&1 &
  epid=$!; pids+=($epid)
  disown
  for _ in $(seq 200); do grep -qs "ready to serve client requests" "$tmp/etcd.log" && break; sleep 0.05; done
  j=$("$sim" --store "etcd://127.0.0.1:$eport/scale" --nodes "$etcd_n" --keep-alive "$keep_alive" \
        --steady "$steady" --daemon-pid "$epid")
  row "$etcd_n" "etcd, one member" "$j"
elif ((etcd_n > 0)); then
  etcd_note="(etcd row not run: $etcd missing; install etcd-server)"
fi

ttable="| agents (N) | torch 1.13 c10d: form a round, s | ccrun: form, s | torch: bytes per node per s | ccrun: bytes per node per s | bytes ratio torch / ccrun |
|---|---|---|---|---|---|"
for n in "${torch_sizes[@]}"; do
  start_daemon
  t=$("$python" "$here/scripts/bench_scale_torch.py" --port "$dport" --nodes "$n" --steady "$steady" 2>/dev/null)
  stop_daemon
  start_daemon
  c=$("$sim" --store "tcp://127.0.0.1:$dport" --nodes "$n" --keep-alive 5 --steady "$steady" \
        --daemon-port "$dport")
  stop_daemon
  tb=$(field "$t" bytes_per_node_per_s); cb=$(field "$c" steady.wire_bytes_per_node_per_s)
  ttable+=$'\n'"| $n | $(field "$t" form_s) | $(field "$c" form_s) | $tb | $cb | $(awk -v a="$tb" -v b="$cb" 'BEGIN{printf "%.1fx", a / b}') |"
done

# A job watched by `ccrun top` (a reader's lease at a 1 s refresh) against
# the same job unwatched, before and after the lease.
wtable="| agents (N) | unwatched: bytes per node per s | watched (1 s refresh): bytes per node per s | watched: requests per node per s | lease expired: bytes per node per s |
|---|---|---|---|---|"
for n in "${watch_sizes[@]}"; do
  start_daemon
  w=$("$sim" --store "tcp://127.0.0.1:$dport" --nodes "$n" --keep-alive "$keep_alive" \
        --steady "$steady" --watch)
  stop_daemon
  wreq=$("$python" -c 'import json,sys; j=json.loads(sys.argv[1]); print("%.3g" % (j["watched"]["requests_per_s"] / j["nodes"]))' "$w")
  wtable+=$'\n'"| $n | $(field "$w" steady.bytes_per_node_per_s) | $(field "$w" watched.bytes_per_node_per_s) | $wreq | $(field "$w" after_watch.bytes_per_node_per_s) |"
done

echo "$table"
echo
echo "$ttable"
echo
echo "$wtable"
[[ -n $etcd_note ]] && echo "$etcd_note"
if ((!smoke)); then
  section="Measured by \`scripts/bench-scale.sh\` on $(date -u +%Y-%m-%d), $(nproc) cores (load average
$load when it started). Every agent is a thread of \`rdzv_scale_sim\` running the agent's own
\`RendezvousHandler\` with its two store connections (one it joins on, one its watch parks on),
against one ccrun-rendezvous over loopback TCP; keep-alive ${keep_alive} s x 3. N stops at
$largest here: the open-file limit is $fd_limit and cannot be raised in this container, and the
daemon holds 2 connections per agent. Requests and payload bytes (keys and values) are counted in
the clients; the daemon's CPU and RSS are read from /proc. \"Detect\" runs from the moment one agent
stops heart-beating to the last other agent's kNodeDead; the bound in brackets is the target,
keep_alive_interval x keep_alive_max_attempt + 1 s. The simulation leaves out network latency
between hosts, process start-up and each node's other load (docs/rendezvous.md).

$table

torch's side: N \`DynamicRendezvousHandler\`s (torch 1.13, \`C10dRendezvousBackend\`, keep-alive
fixed at 5 s) as threads, each with its own TCPStore client, against the same daemon; both sides'
bytes in this table are those through the daemon's port (\`ss\`), framing included, at a 5 s
keep-alive. torch does not
detect a silent node in the rendezvous at all. Larger N were not run for torch: each of its
keep-alives rewrites and re-reads the whole rendezvous state, so its cost per node grows with N.

$ttable

Watched: the same simulation at a ${keep_alive} s keep-alive while a reader holds \`ccrun top\`'s
lease (ccrun/watch_lease.h) at a 1 s refresh, on a connection of its own that is not counted;
then again once the reader stopped and its lease expired. Payload bytes counted in the agents'
clients, as above.

$wtable"
  "$python" "$here/scripts/write_bench_section.py" "$here/docs/benchmarks.md" bench-scale \
    "Rendezvous at scale" "$section"
fi
plot_section bench-scale "$table"$'\n\n'"$ttable" $((!smoke))
