#!/usr/bin/env bash
# gpu-check.sh: ccrun on NVIDIA GPUs, in one command. On a machine with a GPU
# it gets ccrun's binaries (builds them, or takes a prebuilt bundle), then runs
#   1. every real NCCL test (tests/collectives/nccl_test.cpp, "[nccl]"), and
#      the CPU tests of the NCCL path over the fake NCCL, for comparison;
#   2. the NCCL overhead benchmark (ccrun all_reduce + wait against raw
#      ncclAllReduce + stream sync, world size 1), beside torch's own NCCL
#      all_reduce + torch.cuda.synchronize() when a torch with CUDA is
#      importable; it fails when ccrun's overhead at 4 B is over 3 us;
#   3. examples/train_linreg_cuda (C++, CUDA buffers, cuBLAS) launched by
#      `ccrun --standalone --nproc-per-node <GPUs>`;
#   4. examples/ddp_logreg.py --device cuda (torch DDP over NCCL) launched by
#      ccrun, when a torch with CUDA is importable; then (4b) what the start-up
#      hook adds to each torch call (scripts/bench_python_hook.py) on gloo and
#      on NCCL;
#   5. the health gate's GPU checks through the driver's NVML (docs/health.md):
#      a passing gate on every GPU, a CUDA_VISIBLE_DEVICES naming one GPU more
#      than the machine has (the gate fails: missing), and GPU memory held by
#      another process (the gate waits, then fails naming its pid; one that
#      frees it within the bound passes), the last with torch only;
#   6. a hang on the GPU (torch only): examples/hang_demo.py --device cuda
#      --fault gpu, whose rank 0 runs a kernel that never ends before its
#      all_reduce #20; the verdict comes within --hang-timeout + 2 s, the
#      incident folder holds torch's NCCL flight-recorder dump of that rank,
#      ccrun says from it that all_reduce #20 never completed on the GPU, and
#      the summary's root cause says so; torch warned of no variable ccrun set
#      for another torch version (NCCL_ASYNC_ERROR_HANDLING, the flight
#      recorder's TORCH_NCCL_ names);
# prints a summary table and exits 1 if any step failed. Without a GPU
# (nvidia-smi lists none, or CUDA_VISIBLE_DEVICES hides them all) it prints
# "gpu-check: skipped: no GPU ..." and exits 0.
#
#   scripts/gpu-check.sh                # build into build-gpu/ and run all
#   scripts/gpu-check.sh --quick        # benchmark up to 1 MiB only
#   scripts/gpu-check.sh --docs         # also write the benchmark table into docs/benchmarks.md
#   CCRUN_GPU_BUNDLE=dir scripts/gpu-check.sh   # use prebuilt binaries, build nothing
#
# What it needs on the GPU machine:
#   - an NVIDIA driver (nvidia-smi) and one GPU or more;
#   - the CUDA toolkit's runtime libraries (libcudart, libcublas) under
#     $CUDA_HOME or /usr/local/cuda (lib64/ or lib/);
#   - NCCL: nccl.h and libnccl.so.2 from $NCCL_HOME, from the CUDA directory,
#     or from a pip wheel (site-packages/nvidia/nccl/{include,lib}, as torch's
#     wheels install it), found through the Python interpreter below;
#   - ccrun's binaries, one of:
#       a. built here (the default): cmake >= 3.20, a C++20 compiler, ninja or
#          make, nvcc-free (the example uses cuBLAS, no kernel of its own), and
#          ccrun's build dependencies: Boost >= 1.74 headers, spdlog + fmt,
#          nlohmann_json 3, yaml-cpp, CLI11, gloo, Catch2 2 (Debian/Ubuntu:
#          libboost-dev libspdlog-dev nlohmann-json3-dev libyaml-cpp-dev
#          libcli11-dev libgloo-dev catch2; scripts/setup.sh lists them);
#       b. CCRUN_GPU_BUNDLE=<dir> holding bin/{ccrun,ccrun_collectives_tests,
#          nccl_overhead_bench,train_linreg_cuda} and lib/ (the shared
#          libraries a bare machine lacks), as
#            ../shared/tools/device-bundle.sh <dir> build/launcher/ccrun \
#              build/tests/ccrun_collectives_tests build/tests/nccl_overhead_bench \
#              build/examples/train_linreg_cuda
#          (the project's shared tools, beside the checkout) makes them on a
#          machine that has the dependencies, CUDA and NCCL
#          headers (configured with -DCCRUN_WITH_NCCL=ON); then no compiler
#          and no -dev package is needed here. That script leaves out NCCL and
#          libcudart but copies libcublas*.so (hundreds of MB): delete
#          <dir>/lib/libcublas* before carrying it, the GPU machine's CUDA has
#          them (same CUDA major version as the build: 13 here). With the
#          hook's C wrappers in <dir>/python/ (build/agent/python/_ccrun_hook*.so:
#          the stable-ABI one loads in this machine's Python 3.12), ccrun's torch
#          workers get them, and their per-call cost is measured;
#   - optional, for the torch columns and the DDP job: a python3 whose torch
#     sees CUDA ($PYTHON_EXEC, else python3, else /usr/bin/python3); those
#     steps are SKIPPED without it.
# Logs of every step go to $GPU_CHECK_LOGS (default: a new temporary folder).
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
quick=0 docs=0
for a in "$@"; do
  case $a in
    --quick) quick=1 ;;
    --docs) docs=1 ;;
    *) echo "gpu-check: unknown option $a (use --quick, --docs)" >&2; exit 2 ;;
  esac
done

# ---- GPUs ----------------------------------------------------------------
gpus=0
if command -v nvidia-smi >/dev/null 2>&1; then
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
fi
if [[ -n ${CUDA_VISIBLE_DEVICES+set} ]]; then
  if [[ -z $CUDA_VISIBLE_DEVICES || $CUDA_VISIBLE_DEVICES == -1* ]]; then
    gpus=0
  else
    visible=$(tr ',' '\n' <<<"$CUDA_VISIBLE_DEVICES" | grep -c .)
    ((visible < gpus)) && gpus=$visible
  fi
fi
if ((gpus == 0)); then
  why="nvidia-smi lists none"
  command -v nvidia-smi >/dev/null 2>&1 || why="no nvidia-smi, so no NVIDIA driver"
  [[ -n ${CUDA_VISIBLE_DEVICES+set} ]] && why+=", CUDA_VISIBLE_DEVICES=\"$CUDA_VISIBLE_DEVICES\""
  echo "gpu-check: skipped: no GPU ($why)"
  exit 0
fi
nproc_gpu=$((gpus > 8 ? 8 : gpus))
echo "gpu-check: $gpus GPU(s): $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"

logs=${GPU_CHECK_LOGS:-$(mktemp -d /tmp/gpu-check.XXXXXX)}
mkdir -p "$logs"
declare -a rows=()
failed=0
record() {  # name result seconds note
  rows+=("| $1 | $2 | $3 | $4 |")
  [[ $2 == FAIL ]] && failed=1
  echo "gpu-check: $1: $2 ${4:+($4)}"
}

# ---- Python with torch + CUDA (optional) ---------------------------------
torch_py=""
for py in ${PYTHON_EXEC:-} python3 /usr/bin/python3; do
  command -v "$py" >/dev/null 2>&1 || continue
  if "$py" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    torch_py=$(command -v "$py")
    break
  fi
done
echo "gpu-check: torch with CUDA: ${torch_py:-none} $([[ -n $torch_py ]] && "$torch_py" -c 'import torch; print(torch.__version__)')"

# ---- CUDA and NCCL -------------------------------------------------------
cuda_home=${CUDA_HOME:-/usr/local/cuda}
cuda_lib=$cuda_home/lib64
[[ -d $cuda_lib ]] || cuda_lib=$cuda_home/lib
nccl_inc="" nccl_lib=""
nccl_candidates=(${NCCL_HOME:-} "$cuda_home")
for py in $torch_py python3 /usr/bin/python3; do
  command -v "$py" >/dev/null 2>&1 || continue
  d=$("$py" -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null) && nccl_candidates+=("$d")
done
for d in "${nccl_candidates[@]}"; do
  for l in "$d/lib64" "$d/lib"; do
    if [[ -z $nccl_lib ]] && compgen -G "$l/libnccl.so*" >/dev/null; then nccl_lib=$l; fi
  done
  if [[ -z $nccl_inc && -f $d/include/nccl.h ]]; then nccl_inc=$d/include; fi
done
if [[ -z $nccl_lib ]]; then
  record "find NCCL" FAIL 0 "no libnccl.so under ${nccl_candidates[*]}; set NCCL_HOME or pip install nvidia-nccl-cu12"
else
  echo "gpu-check: NCCL: libraries $nccl_lib, header ${nccl_inc:-none}"
fi
export LD_LIBRARY_PATH=${nccl_lib:+$nccl_lib:}$cuda_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

# ---- ccrun's binaries ----------------------------------------------------
if [[ -n ${CCRUN_GPU_BUNDLE:-} ]]; then
  bundle=$(cd "$CCRUN_GPU_BUNDLE" && pwd)
  export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$bundle/lib
  export PATH=$bundle/bin:$PATH  # eu-stack, when the bundle carries it
  ccrun=$bundle/bin/ccrun tests=$bundle/bin/ccrun_collectives_tests
  bench=$bundle/bin/nccl_overhead_bench example=$bundle/bin/train_linreg_cuda
  hook_modules=$bundle/python
  record "binaries" PASS 0 "prebuilt: $bundle"
else
  build=${BUILD_DIR:-$here/build-gpu}
  t0=$SECONDS
  gen=()
  command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
  nccl_so=$(ls "$nccl_lib"/libnccl.so "$nccl_lib"/libnccl.so.2 2>/dev/null | head -1)
  if cmake -S "$here" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCCRUN_WITH_NCCL=ON \
       -DCUDAToolkit_ROOT="$cuda_home" ${nccl_inc:+-DNCCL_INCLUDE_DIR="$nccl_inc"} \
       ${nccl_so:+-DNCCL_LIBRARY="$nccl_so"} >"$logs/build.log" 2>&1 &&
     cmake --build "$build" -j"$(nproc)" --target ccrun ccrun_collectives_tests nccl_overhead_bench \
       train_linreg_cuda >>"$logs/build.log" 2>&1; then
    record "build" PASS $((SECONDS - t0)) "$build"
  else
    record "build" FAIL $((SECONDS - t0)) "see $logs/build.log; the header of this script lists what a build needs"
    tail -20 "$logs/build.log"
  fi
  ccrun=$build/launcher/ccrun tests=$build/tests/ccrun_collectives_tests
  bench=$build/tests/nccl_overhead_bench example=$build/examples/train_linreg_cuda
  hook_modules=$build/agent/python
fi
# The start-up hook for ccrun's Python workers: its sources with its C wrappers beside them,
# where they were built (a bundle's ccrun does not know this checkout's build tree).
hook_c=0
if compgen -G "$hook_modules/_ccrun_hook*.so" >/dev/null; then
  mkdir -p "$logs/hook/agent/python"
  cp "$here"/agent/python/*.py "$hook_modules"/_ccrun_hook*.so "$logs/hook/agent/python/"
  export CCRUN_PYTHON_HOOK_DIR=$logs/hook/agent/python
  hook_c=1
fi

# run LOG CMD...: runs CMD with a 10-minute limit, output to LOG; returns its status.
run() {
  local log=$1; shift
  timeout 600 "$@" >"$log" 2>&1
}
have_bins=1
for b in "$ccrun" "$tests" "$bench" "$example"; do
  if [[ ! -x $b ]]; then
    have_bins=0
    ((failed)) || record "binaries" FAIL 0 "$b is missing"
  fi
done

# ---- 1. NCCL tests -------------------------------------------------------
if ((have_bins)); then
  t0=$SECONDS
  if run "$logs/nccl_test.log" "$tests" "[nccl]"; then
    if grep -q "skipped: the NCCL backend is built\|skipped: this build has no NCCL" "$logs/nccl_test.log"; then
      record "NCCL tests (real)" FAIL $((SECONDS - t0)) "skipped on a GPU machine: $(grep -m1 skipped "$logs/nccl_test.log" | sed 's/^ *//')"
    else
      note=$(grep -m1 -o "skipped: needs 2 or more CUDA devices.*" "$logs/nccl_test.log" || true)
      record "NCCL tests (real)" PASS $((SECONDS - t0)) "$(grep -m1 -o 'test cases:.*\|All tests passed.*' "$logs/nccl_test.log")${note:+; multi-GPU: $note}"
    fi
  else
    record "NCCL tests (real)" FAIL $((SECONDS - t0)) "see $logs/nccl_test.log"
    tail -30 "$logs/nccl_test.log"
  fi
  t0=$SECONDS
  if run "$logs/nccl_fake_test.log" "$tests" "[nccl-fake],[dispatch],[backend]"; then
    record "NCCL path tests (fake NCCL)" PASS $((SECONDS - t0)) "$(grep -m1 -o 'All tests passed.*' "$logs/nccl_fake_test.log")"
  else
    record "NCCL path tests (fake NCCL)" FAIL $((SECONDS - t0)) "see $logs/nccl_fake_test.log"
  fi
fi

# ---- 2. overhead benchmark ----------------------------------------------
table=""
if ((have_bins)); then
  max=$((64 << 20))
  ((quick)) && max=$((1 << 20))
  t0=$SECONDS
  if run "$logs/bench.jsonl" "$bench" "$max"; then
    torch_note="torch: no torch with CUDA"
    : >"$logs/torch.jsonl"
    if [[ -n $torch_py ]]; then
      if run "$logs/torch.jsonl" "$torch_py" "$here/scripts/torch_nccl_overhead.py" "$max"; then
        torch_note="torch $("$torch_py" -c 'import torch; print(torch.__version__)')"
      else
        torch_note="torch run failed: $(tail -1 "$logs/torch.jsonl")"
        : >"$logs/torch.jsonl"
      fi
    fi
    table=$(python3 - "$logs/bench.jsonl" "$logs/torch.jsonl" <<'PY'
import json, sys
def size(b):
    return f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB" if b >= 1 << 10 else f"{b} B"
ours = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
torch = {r["bytes"]: r["torch_us"] for r in (json.loads(l) for l in open(sys.argv[2]) if l.startswith("{"))}
print("| size | raw ncclAllReduce + sync us | ccrun nccl group all_reduce + wait us | overhead us "
      "| ccrun default group us | overhead us | torch all_reduce + sync us |")
print("|---|---|---|---|---|---|---|")
for r in ours:
    t = torch.get(r["bytes"])
    print(f"| {size(r['bytes'])} | {r['raw_us']:.2f} | {r['ccrun_us']:.2f} | {r['overhead_us']:.2f} "
          f"| {r['auto_us']:.2f} | {r['auto_overhead_us']:.2f} | " + (f"{t:.2f}" if t is not None else "-") + " |")
PY
)
    # The larger of the two ccrun paths' overheads at the smallest size.
    overhead=$(python3 -c 'import json,sys; r = json.loads(open(sys.argv[1]).readline()); print(max(r["overhead_us"], r["auto_overhead_us"]))' "$logs/bench.jsonl")
    if python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) <= 3.0 else 1)' "$overhead"; then
      record "NCCL overhead (world size 1)" PASS $((SECONDS - t0)) "ccrun over raw NCCL at 4 B: $overhead us (limit 3); $torch_note"
    else
      record "NCCL overhead (world size 1)" FAIL $((SECONDS - t0)) "ccrun over raw NCCL at 4 B: $overhead us, over the 3 us limit; $torch_note"
    fi
  else
    record "NCCL overhead (world size 1)" FAIL $((SECONDS - t0)) "see $logs/bench.jsonl"
    tail -5 "$logs/bench.jsonl"
  fi
fi

# ---- 3. C++ example on CUDA buffers, launched by ccrun -------------------
if ((have_bins)); then
  t0=$SECONDS
  if run "$logs/train_linreg_cuda.log" "$ccrun" --standalone --nproc-per-node "$nproc_gpu" --no-python "$example" &&
     grep -q "trained on $nproc_gpu GPU worker" "$logs/train_linreg_cuda.log"; then
    record "C++ example on CUDA buffers (ccrun, $nproc_gpu ranks)" PASS $((SECONDS - t0)) "$(grep -m1 -o 'loss [^,]*-> [^,]*, max .*' "$logs/train_linreg_cuda.log")"
  else
    record "C++ example on CUDA buffers (ccrun, $nproc_gpu ranks)" FAIL $((SECONDS - t0)) "see $logs/train_linreg_cuda.log"
    tail -20 "$logs/train_linreg_cuda.log"
  fi
fi

# ---- 4. torch DDP over NCCL, launched by ccrun ---------------------------
if [[ -z $torch_py ]]; then
  record "torch DDP over NCCL (ccrun)" SKIP 0 "no python3 with a CUDA torch"
elif ((have_bins)); then
  t0=$SECONDS
  if run "$logs/ddp.log" env PYTHON_EXEC="$torch_py" "$ccrun" --standalone --nproc-per-node "$nproc_gpu" \
       "$here/examples/ddp_logreg.py" --device cuda --epochs 20 &&
     grep -q "on cuda .*accuracy" "$logs/ddp.log"; then
    record "torch DDP over NCCL (ccrun, $nproc_gpu ranks)" PASS $((SECONDS - t0)) "$(grep -m1 -o 'accuracy .*' "$logs/ddp.log")"
  else
    record "torch DDP over NCCL (ccrun, $nproc_gpu ranks)" FAIL $((SECONDS - t0)) "see $logs/ddp.log"
    tail -20 "$logs/ddp.log"
  fi
fi

# ---- 4b. the start-up hook's cost per torch call (scripts/bench_python_hook.py) ----
# On gloo, then on NCCL (one GPU's buffers, the calls timed as issued).
if [[ -z $torch_py ]]; then
  record "start-up hook's cost per torch call" SKIP 0 "no python3 with torch"
else
  calls=2000
  ((quick)) && calls=1000
  for backend in gloo nccl; do
    t0=$SECONDS
    log=$logs/python_hook_$backend.log
    # Its C wrappers from $logs/hook (CCRUN_BUILD_DIR/agent/python), when there are any.
    if run "$log" env CCRUN_BUILD_DIR="$logs/hook" "$torch_py" \
         "$here/scripts/bench_python_hook.py" "$calls" --backend "$backend"; then
      row=$(grep -m1 '^all_reduce(1 element) ' "$log" | tr -s ' ')
      ((hook_c)) || row+=" (no C wrappers: none built or carried)"
      record "start-up hook's cost per torch call ($backend)" PASS $((SECONDS - t0)) "$row; all rows in $log"
    else
      record "start-up hook's cost per torch call ($backend)" FAIL $((SECONDS - t0)) "see $log"
      tail -20 "$log"
    fi
  done
fi

# ---- 5. the health gate's GPU checks, through NVML ----------------------
# health_checks LOG_DIR: the first health event's checks, "name=verdict (ms ms): detail" a line.
health_checks() {
  python3 - "$1" <<'PY'
import glob, json, sys
for f in glob.glob(sys.argv[1] + "/*/events.jsonl"):
    for line in open(f):
        e = json.loads(line)
        if e.get("event") == "health":
            for c in e["checks"]:
                print(f'{c["name"]}={c["verdict"]} ({c.get("ms", 0)} ms): {c.get("detail", "")}')
            sys.exit(0)
PY
}
if ((have_bins)); then
  t0=$SECONDS
  run "$logs/health_pass.log" "$ccrun" --standalone --nproc-per-node "$nproc_gpu" \
    --log-dir "$logs/health_pass" --no-python /bin/true
  rc=$?
  checks=$(health_checks "$logs/health_pass")
  echo "$checks" >"$logs/health_pass.checks"
  gpu_ok=$(grep -c '^gpu[a-z_]*=ok' <<<"$checks")
  if ((rc == 0 && gpu_ok == 4)); then
    record "health gate: GPU checks pass" PASS $((SECONDS - t0)) "$(grep '^gpu' <<<"$checks" | sed 's/: .*//' | tr '\n' ' ')"
  else
    record "health gate: GPU checks pass" FAIL $((SECONDS - t0)) "exit $rc; $(tr '\n' ';' <<<"$checks")"
  fi
  t0=$SECONDS
  CUDA_VISIBLE_DEVICES=$(seq -s, 0 "$gpus") run "$logs/health_missing.log" "$ccrun" --standalone \
    --nproc-per-node 1 --no-python /bin/true
  rc=$?
  line=$(grep -m1 -o 'failed its health gate: .*' "$logs/health_missing.log")
  if ((rc == 1)) && grep -q "gpus: " <<<"$line"; then
    record "health gate: a GPU missing" PASS $((SECONDS - t0)) "$line"
  else
    record "health gate: a GPU missing" FAIL $((SECONDS - t0)) "exit $rc; see $logs/health_missing.log"
  fi
  if [[ -n $torch_py ]]; then
    t0=$SECONDS
    # Holds 1 GiB of GPU 0 for $1 seconds, saying "held" once it does.
    hold() {
      exec "$torch_py" -c 'import sys, time, torch
x = torch.empty(1 << 28, device="cuda:0"); torch.cuda.synchronize(); print("held", flush=True)
time.sleep(float(sys.argv[1]))' "$1"
    }
    coproc HOLDER { hold 120; }
    holder=$HOLDER_PID  # bash unsets HOLDER_PID once the holder ends
    read -r -t 60 held <&"${HOLDER[0]}"
    run "$logs/health_memory.log" env CUDA_VISIBLE_DEVICES=0 "$ccrun" --standalone --nproc-per-node 1 \
      --health-timeout 2 --no-python /bin/true
    rc=$?
    kill "$holder" 2>/dev/null; wait "$holder" 2>/dev/null
    line=$(grep -m1 -o 'failed its health gate: .*' "$logs/health_memory.log")
    if [[ $held == held ]] && ((rc == 1)) && grep -q "gpu_memory: GPU 0: pid [0-9]* holds" <<<"$line"; then
      record "health gate: GPU memory held" PASS $((SECONDS - t0)) "$line"
    else
      record "health gate: GPU memory held" FAIL $((SECONDS - t0)) "holder: ${held:-none}; exit $rc; see $logs/health_memory.log"
    fi
    t0=$SECONDS
    coproc HOLDER { hold 1.5; }
    holder=$HOLDER_PID
    read -r -t 60 held <&"${HOLDER[0]}"
    run "$logs/health_freed.log" env CUDA_VISIBLE_DEVICES=0 "$ccrun" --standalone --nproc-per-node 1 \
      --health-timeout 10 --log-dir "$logs/health_freed" --no-python /bin/true
    rc=$?
    wait "$holder" 2>/dev/null
    memory=$(health_checks "$logs/health_freed" | grep '^gpu_memory=')
    if ((rc == 0)) && grep -q '=ok .*freed after' <<<"$memory"; then
      record "health gate: GPU memory freed in time" PASS $((SECONDS - t0)) "$memory"
    else
      record "health gate: GPU memory freed in time" FAIL $((SECONDS - t0)) "exit $rc; $memory; see $logs/health_freed.log"
    fi
  fi
fi

# ---- 6. a hang on the GPU: the verdict and the flight recorder -----------
if [[ -n $torch_py ]] && ((have_bins)); then
  t0=$SECONDS
  run "$logs/gpu_hang.log" env PYTHON_EXEC="$torch_py" "$ccrun" --standalone --nproc-per-node "$nproc_gpu" \
    --hang-timeout 5 --max-restarts 0 --log-dir "$logs/gpu_hang" \
    "$here/examples/hang_demo.py" --device cuda --fault gpu --sleep-rank 0 --sleep-before 20
  rc=$?
  verdict=$(grep -m1 -o 'the job is hung .*' "$logs/gpu_hang.log")
  dumps=$(find "$logs/gpu_hang" -path '*nccl_flight_recorder*' -type f | wc -l)
  fr=$("$torch_py" - "$logs/gpu_hang" <<'PY' 2>&1
import glob, pickle, sys
for f in sorted(glob.glob(sys.argv[1] + "/**/nccl_flight_recorder/*", recursive=True)):
    d = pickle.load(open(f, "rb"))
    entries = d.get("entries", [])
    states = {}
    for e in entries:
        states[e.get("state")] = states.get(e.get("state"), 0) + 1
    last = entries[-1] if entries else {}
    print(f"{f.rsplit('/', 1)[-1]}: {len(entries)} entries {states}; last "
          f"{last.get('profiling_name')} #{last.get('collective_seq_id')} {last.get('state')}")
PY
)
  echo "$fr" >"$logs/gpu_hang.flight_recorder"
  finding=$(grep -m1 -o 'NCCL flight recorder: rank 0: all_reduce #20 of group 0.*not completed on the GPU.*' "$logs/gpu_hang.log")
  # The root cause in the summary carries the finding (the hook's verdict names no cause).
  cause=$(grep -A1 '^  error:' "$logs/gpu_hang.log" | tail -1)
  # No warning of a variable ccrun set for another torch.
  deprecated=$(grep -ho 'Environment variable [A-Z_]* is deprecated' "$logs/gpu_hang.log" "$logs/ddp.log" | sort -u | tr '\n' ';')
  if ((rc != 0)) && [[ -n $verdict && -n $finding ]] && ((dumps > 0)) && grep -q "scheduled\|started" <<<"$fr" &&
     grep -q "; NCCL flight recorder: rank 0: all_reduce #20 " <<<"$cause" &&
     ! grep -q "NCCL_ASYNC_ERROR_HANDLING\|TORCH_NCCL_TRACE_BUFFER_SIZE\|TORCH_NCCL_DEBUG_INFO_TEMP_FILE" <<<"$deprecated"; then
    record "hang on the GPU: verdict + flight recorder" PASS $((SECONDS - t0)) "$verdict; $finding; $(head -1 <<<"$fr"); torch's deprecation warnings: ${deprecated:-none}"
  else
    record "hang on the GPU: verdict + flight recorder" FAIL $((SECONDS - t0)) "exit $rc; verdict: ${verdict:-none}; root cause: ${cause:-none}; dumps $dumps: $(head -1 <<<"$fr"); deprecated: ${deprecated:-none}; see $logs/gpu_hang.log"
    tail -40 "$logs/gpu_hang.log"
  fi
fi

# ---- summary -------------------------------------------------------------
echo
echo "| step | result | seconds | note |"
echo "|---|---|---|---|"
printf '%s\n' "${rows[@]}"
if [[ -n $table ]]; then
  echo
  echo "$table"
  if ((docs)); then
    gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
    section="Measured by \`scripts/gpu-check.sh\` on $(date -u +%Y-%m-%d), $gpu, world size 1:
one call then a sync, 1000 calls per size, best of 3 rounds per side (torch: \`dist.all_reduce(t)\`
then \`torch.cuda.synchronize()\`, scripts/torch_nccl_overhead.py).

$table"
    python3 "$here/scripts/write_bench_section.py" "$here/docs/benchmarks.md" bench-nccl-overhead \
      "NCCL overhead" "$section"
    echo "gpu-check: wrote the table into docs/benchmarks.md"
  fi
fi
echo "gpu-check: logs in $logs"
if ((failed)); then
  echo "gpu-check: FAILED"
  exit 1
fi
echo "gpu-check: passed"
