#!/usr/bin/env bash
# Launch overhead and failure-to-restart latency of ccrun, side by side with
# torchrun from Debian's python3-torch (1.13, patched at run time by
# scripts/torchrun_patched.py for Python 3.11), in one run. Writes a Markdown
# table to stdout and into docs/benchmarks.md between the bench-launch markers.
# The "busy node" column repeats ccrun's measurements with 1,000 idle
# processes (sleep) running beside them, as on a GPU node with data-loader
# workers and monitoring agents: ccrun's cost must not grow with them.
#
#   scripts/bench-launch.sh           # nproc 1, 8, 32, 128; ccrun 15 runs each, torchrun 5; 1,000 idle processes
#   scripts/bench-launch.sh --smoke   # nproc 1, 1 run, 100 idle processes, for CI
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/bench_common.sh" "$@"  # here, build, python, smoke
load=$(cut -d' ' -f1 /proc/loadavg)
cmake --build "$build" --target ccrun spawn_bound >/dev/null
ccrun=$build/launcher/ccrun
torchrun=("$python" "$here/scripts/torchrun_patched.py")
busy_pids=()
cleanup() {
  ((${#busy_pids[@]})) && kill "${busy_pids[@]}" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

# ccrun's runs are cheap (<= 0.1 s) and noisy on 2 shared cores: 15 of them
# make its medians, and the busy-node differences, steady; torchrun's take 6 s each.
if ((smoke)); then sizes=(1); runs=1; ccrun_runs=1; busy_count=100; else sizes=(1 8 32 128); runs=5; ccrun_runs=15; busy_count=1000; fi

# Starts / stops the busy node's idle processes (ours: killed by pid).
busy_start() {
  for _ in $(seq "$busy_count"); do sleep 3600 & busy_pids+=($!); done
}
busy_stop() {
  kill "${busy_pids[@]}" 2>/dev/null
  wait "${busy_pids[@]}" 2>/dev/null || true
  busy_pids=()
}

free_port() { "$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# median of numbers on stdin
median() { sort -g | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }

# measure <count> <launcher...>: runs it <count> times; prints
# "median_wall_s median_rss_kib max_rss_kib" (the RSS of each run is its peak).
measure() {
  local walls=() rsss=() count=$1
  shift
  for _ in $(seq "$count"); do
    local t0 t1
    t0=$(date +%s%N)
    /usr/bin/time -f "%M" -o "$tmp/time" "$@" >/dev/null 2>"$tmp/err" || {
      echo "bench-launch: failed: $*" >&2; cat "$tmp/err" >&2; exit 1; }
    t1=$(date +%s%N)
    wall=$(awk -v a="$t1" -v b="$t0" 'BEGIN{printf "%.4f", (a - b) / 1e9}')
    read -r kib <"$tmp/time"
    walls+=("$wall")
    rsss+=("$kib")
  done
  printf '%s %s %s\n' "$(printf '%s\n' "${walls[@]}" | median)" \
    "$(printf '%s\n' "${rsss[@]}" | median)" "$(printf '%s\n' "${rsss[@]}" | sort -n | tail -1)"
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN{ if (b > 0) printf "%.1f", a / b; else print "n/a" }'; }
# "+4%": how much more b costs than a
more() { awk -v a="$1" -v b="$2" 'BEGIN{ if (a > 0) printf "%+.0f%%", (b - a) * 100 / a; else print "n/a" }'; }

# Failure to restart: rank 0 crashes in attempt 0 after writing the time;
# every worker of attempt 1 writes the time it starts.
crash_script='if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then if [ "$RANK" = 0 ]; then date +%s%N > "$OUT/crash"; exit 1; fi; sleep 30; else date +%s%N >> "$OUT/start"; fi'
restart_latency() {
  local out=$tmp/restart; rm -rf "$out"; mkdir -p "$out"
  OUT=$out "$@" /bin/sh -c "$crash_script" >/dev/null 2>&1 || true
  local crash first
  crash=$(cat "$out/crash"); first=$(sort -n "$out/start" | head -1)
  awk -v a="$first" -v b="$crash" 'BEGIN{printf "%.1f", (a - b) / 1e6}'
}
ccrun_restart_ms() {  # median of $ccrun_runs
  for _ in $(seq "$ccrun_runs"); do
    restart_latency "$ccrun" --nproc-per-node 4 --max-restarts 1 --master-port "$(free_port)" --no-python
    echo
  done | median
}
# The same crash in an elastic job running below its maximum (--nnodes 1:2,
# c10d, one node): the restarted round has no more nodes to wait for, yet a
# rendezvous that does not know who survived waits out the last call
# (last_call_timeout: torchrun's default 30 s; 3 s in the smoke run).
if ((smoke)); then last_call=3; else last_call=30; fi
elastic_args() {  # launcher flag style (- or _) -> the elastic job's flags
  local s=$1
  echo "--nnodes 1:2 --rdzv${s}backend c10d --rdzv${s}endpoint 127.0.0.1:$(free_port) --rdzv${s}conf last_call_timeout=$last_call"
}
ccrun_elastic_restart_ms() {  # median of $ccrun_runs
  for _ in $(seq "$ccrun_runs"); do
    # shellcheck disable=SC2046
    restart_latency "$ccrun" --nproc-per-node 4 --max-restarts 1 $(elastic_args -) --no-python
    echo
  done | median
}

# The physical bound, in the same run: posix_spawn of N /bin/true and their
# exits, no launcher (tests/tools/spawn_bound.cpp); median of $ccrun_runs.
spawn_bound() {
  for _ in $(seq "$ccrun_runs"); do "$build/tests/spawn_bound" "$1"; done | median
}

# ccrun on a quiet node and on a busy one; torchrun on the quiet one.
declare -A cw cr cm bw br bm sb
for n in "${sizes[@]}"; do
  read -r "cw[$n]" "cr[$n]" "cm[$n]" < <(measure "$ccrun_runs" "$ccrun" --nproc-per-node "$n" --master-port "$(free_port)" --no-python /bin/true)
  sb[$n]=$(spawn_bound "$n")
done
c_ms=$(ccrun_restart_ms)
ce_ms=$(ccrun_elastic_restart_ms)
busy_start
for n in "${sizes[@]}"; do
  read -r "bw[$n]" "br[$n]" "bm[$n]" < <(measure "$ccrun_runs" "$ccrun" --nproc-per-node "$n" --master-port "$(free_port)" --no-python /bin/true)
done
b_ms=$(ccrun_restart_ms)
busy_stop

table="| measurement | ccrun | ccrun, busy node ($busy_count idle processes) | torchrun (torch 1.13) | ratio (quiet) |
|---|---|---|---|---|"
for n in "${sizes[@]}"; do
  read -r tw tr tm < <(measure "$runs" "${torchrun[@]}" --nproc_per_node "$n" --master_port "$(free_port)" --no_python /bin/true)
  table+=$'\n'"| launch /bin/true x $n: wall seconds (ccrun median of $ccrun_runs, torchrun of $runs) | ${cw[$n]} | ${bw[$n]} ($(more "${cw[$n]}" "${bw[$n]}")) | $tw | $(ratio "$tw" "${cw[$n]}")x faster |"
  table+=$'\n'"| launch /bin/true x $n: launcher peak RSS, KiB (median of the runs' peaks; their max) | ${cr[$n]} (${cm[$n]}) | ${br[$n]} (${bm[$n]}) | $tr ($tm) | $(ratio "$tr" "${cr[$n]}")x less |"
done
# Below the launches: what no launcher can go under, and ccrun's own part.
for n in "${sizes[@]}"; do
  own=$(awk -v c="${cw[$n]}" -v b="${sb[$n]}" 'BEGIN{printf "%.1f", (c - b) * 1000}')
  table+=$'\n'"| spawn bound x $n: posix_spawn of $n /bin/true and their exits, no launcher, seconds (median of $ccrun_runs) | ${sb[$n]} (ccrun's own part: $own ms) | | | |"
done

t_ms=$(restart_latency "${torchrun[@]}" --nproc_per_node 4 --max_restarts 1 --master_port "$(free_port)" --no_python)
table+=$'\n'"| worker crash to restarted workers running, ms (4 workers, default monitor interval; ccrun median of $ccrun_runs, torchrun 1 run) | $c_ms | $b_ms ($(more "$c_ms" "$b_ms")) | $t_ms | $(ratio "$t_ms" "$c_ms")x faster |"
# shellcheck disable=SC2046
te_ms=$(restart_latency "${torchrun[@]}" --nproc_per_node 4 --max_restarts 1 $(elastic_args _) --no_python)
table+=$'\n'"| the same in an elastic job below its maximum (--nnodes 1:2, c10d, one node; last_call_timeout $last_call s), ms | $ce_ms | | $te_ms | $(ratio "$te_ms" "$ce_ms")x faster |"

# Fan-out: a 3-host job started from one command, from the command to every
# worker running (each writes the time it starts). Hosts are 127.0.0.1-3 on
# this machine, reached by tests/launcher/fake_ssh.sh (no ssh: the
# launcher's own cost) and by a real sshd on loopback (ssh handshakes
# included; needs root and /usr/sbin/sshd, as in the namespace cluster).
fanout_ms() {  # ssh_command -> median ms over $runs runs
  local ssh=$1 out=$tmp/fanout ms=()
  printf '127.0.0.1\n127.0.0.2\n127.0.0.3\n' >"$tmp/hosts"
  for _ in $(seq "$runs"); do
    rm -rf "$out"; mkdir -p "$out"
    local t0; t0=$(date +%s%N)
    OUT=$out "$ccrun" --hostfile "$tmp/hosts" --ssh-command "$ssh" --export OUT --master-port "$(free_port)" \
      --no-python /bin/sh -c 'date +%s%N > "$OUT/$RANK"' >/dev/null 2>"$tmp/err" || {
      echo "bench-launch: fan-out over \`$ssh\` failed:" >&2; cat "$tmp/err" >&2; exit 1; }
    local last; last=$(cat "$out"/* | sort -n | tail -1)
    ms+=("$(awk -v a="$last" -v b="$t0" 'BEGIN{printf "%.0f", (a - b) / 1e6}')")
  done
  printf '%s\n' "${ms[@]}" | median
}
fake_ms=$(fanout_ms "$here/tests/launcher/fake_ssh.sh")
table+=$'\n'"| 3-host job, command to every worker running, ms (fake ssh: the fan-out's own cost, median of $runs) | $fake_ms | | no fan-out | |"
if [[ $(id -u) == 0 && -x /usr/sbin/sshd ]] && command -v ssh >/dev/null; then
  sshd_dir=$tmp/sshd; mkdir -p "$sshd_dir" /run/sshd
  ssh-keygen -q -t ed25519 -N '' -f "$sshd_dir/host_key"
  ssh-keygen -q -t ed25519 -N '' -f "$sshd_dir/key"
  cp "$sshd_dir/key.pub" "$sshd_dir/authorized_keys"
  sshd_port=$(free_port)
  cat >"$sshd_dir/config" <<EOF_SSHD
Port $sshd_port
ListenAddress 127.0.0.1
ListenAddress 127.0.0.2
ListenAddress 127.0.0.3
HostKey $sshd_dir/host_key
AuthorizedKeysFile $sshd_dir/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PidFile $sshd_dir/pid
EOF_SSHD
  /usr/sbin/sshd -f "$sshd_dir/config" -E "$sshd_dir/log"
  trap 'kill "$(cat "$sshd_dir/pid" 2>/dev/null)" 2>/dev/null; cleanup' EXIT
  ssh_cmd="ssh -p $sshd_port -i $sshd_dir/key -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR"
  real_ms=$(fanout_ms "$ssh_cmd")
  table+=$'\n'"| 3-host job, command to every worker running, ms (real sshd on loopback, handshakes included, median of $runs) | $real_ms | | no fan-out | |"
else
  table+=$'\n'"| 3-host job over a real sshd | skipped: needs root and /usr/sbin/sshd | | | |"
fi

echo "$table"
if ((!smoke)); then
  section="Measured by \`scripts/bench-launch.sh\` on $(date -u +%Y-%m-%d), $(nproc) cores, load average
$load at the start. Peak RSS is
/usr/bin/time's maximum resident set of the launcher's process tree member with the
largest RSS (the launcher itself: its workers are /bin/true), one figure a run: the table
gives the median of the runs' figures and, in parentheses, the largest.

$table"
  python3 "$here/scripts/write_bench_section.py" "$here/docs/benchmarks.md" bench-launch Launch "$section"
fi
plot_section bench-launch "$table" $((!smoke))
