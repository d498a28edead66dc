#!/usr/bin/env bash
# Builds ccrun with sanitizers and runs the tests that exercise its own
# threads, sockets and signals under them (scripts/test.sh runs this after
# the plain suite):
#   build-asan/  AddressSanitizer + UndefinedBehaviorSanitizer: the store's,
#                rendezvous' (etcd included), launcher's, base's and
#                collectives' unit tests, the agent's loop driven through
#                fakes, and the process tests of the agent (signals, restarts,
#                lost stores: test_hardening, test_launch), of ccrun status
#                and of the CLI
#   build-tsan/  ThreadSanitizer: the store's and rendezvous' unit tests (the
#                server thread, clients on threads, watcher threads), the
#                agent's loop through fakes and its process tests (its store
#                threads beside the io loop)
# The MPI group's tests run under mpiexec with collectives_check, which the
# sanitizer builds do not build (nor is MPICH instrumented): left out of both.
# The collectives are left out of TSan: Debian's libgloo is not instrumented,
# so TSan would not see its threads. Any sanitizer finding fails the run.
#
#   scripts/test-sanitizers.sh            # both
#   scripts/test-sanitizers.sh asan|tsan  # one
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
which=${1:-all}
launcher=()
# The same objects whatever the checkout's path (a CI clone, a worktree).
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$here} CCACHE_NOHASHDIR=1
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi

build() {  # build <dir> <sanitizers> <targets...>
  local dir=$1 san=$2
  shift 2
  cmake -S "$here" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCCRUN_SANITIZE="$san" -DCCRUN_WARNINGS_AS_ERRORS=ON "${launcher[@]}" >/dev/null
  cmake --build "$dir" -j "$(nproc)" --target "$@"
}

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:halt_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
export CCRUN_SANITIZED=1  # tests skip what only a plain build can show (peak RSS)

if [[ $which == all || $which == asan ]]; then
  dir=$here/build-asan
  echo "== sanitizers: AddressSanitizer + UndefinedBehaviorSanitizer ($dir)"
  build "$dir" address,undefined ccrun ccrun-rendezvous ccrun_store_tests ccrun_rendezvous_tests \
    ccrun_launcher_tests ccrun_base_tests ccrun_agent_tests ccrun_collectives_tests store_cli
  (cd "$dir" && ctest --output-on-failure --timeout 900 -j "$(nproc)" \
    -R '^(store|rendezvous|launcher|base|collectives)\.|^agent\.agent loop|integration\.test_(hardening|launch|status|warm_start)$' \
    -E 'fuzz|test_fanout|^collectives\.test_|^collectives\.mpi\.')
fi

if [[ $which == all || $which == tsan ]]; then
  dir=$here/build-tsan
  echo "== sanitizers: ThreadSanitizer ($dir)"
  build "$dir" thread ccrun ccrun-rendezvous ccrun_store_tests ccrun_rendezvous_tests \
    ccrun_agent_tests store_cli
  (cd "$dir" && ctest --output-on-failure --timeout 900 -j "$(nproc)" \
    -R '^(store|rendezvous)\.|^agent\.agent loop|integration\.test_hardening$')
fi
