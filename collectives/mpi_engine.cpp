// The thread that calls MPI for every MPI group of the process (see
// mpi_engine.h): MPI's start and end, the queue of operations, and the loop
// that posts them, tests them and ends them at their deadline.
#include "mpi_engine.h"

#include <future>

#include "durations.h"
#include "reduce_functions.h"

namespace ccrun::collectives {
namespace {

using Clock = std::chrono::steady_clock;

// With operations in flight the engine spins on MPI_Testall; once none has
// ended for this long (a recv waiting for a late peer), it sleeps kNap
// between rounds, so a waiting rank does not hold a core for minutes.
constexpr auto kSpinFor = std::chrono::seconds(1);
constexpr auto kNap = std::chrono::microseconds(50);

// MPI's user function for float16 and bfloat16: inout[i] = in[i] op inout[i],
// by ccrun's own element-wise reductions (computed in float, rounded back).
template <DataType D, ReduceOp O>
void half_reduce(void* in, void* inout, int* len, MPI_Datatype*) {
  static const ReduceFn fn = reduce_function(D, O);
  fn(inout, in, inout, size_t(*len));
}

template <DataType D>
void make_half_ops(MPI_Op (&ops)[4]) {
  check_mpi(MPI_Op_create(&half_reduce<D, ReduceOp::kSum>, 1, &ops[0]), "MPI_Op_create");
  check_mpi(MPI_Op_create(&half_reduce<D, ReduceOp::kProd>, 1, &ops[1]), "MPI_Op_create");
  check_mpi(MPI_Op_create(&half_reduce<D, ReduceOp::kMin>, 1, &ops[2]), "MPI_Op_create");
  check_mpi(MPI_Op_create(&half_reduce<D, ReduceOp::kMax>, 1, &ops[3]), "MPI_Op_create");
}

std::string where(const MpiOp& op) { return std::string(op.name) + " " + op.comm->locus; }

std::exception_ptr failed_earlier(const MpiOp& op) {
  return std::make_exception_ptr(Error(where(op) + ": the group failed earlier (" +
                                       op.comm->broken + "); create a new one"));
}

}  // namespace

std::string mpi_error_text(int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(rc);
  return std::string(text, size_t(len));
}

void check_mpi(int rc, const char* call) {
  if (rc != MPI_SUCCESS) throw Error(std::string(call) + ": " + mpi_error_text(rc));
}

std::shared_ptr<MpiEngine> MpiEngine::get() {
  static std::mutex mu;
  static std::shared_ptr<MpiEngine> engine;  // released at exit; groups hold their own
  static std::string failed;                 // MPI starts once: a failure stays
  std::lock_guard lock(mu);
  if (engine) return engine;
  if (!failed.empty()) throw Error(failed);
  std::shared_ptr<MpiEngine> e(new MpiEngine());
  std::promise<void> started;
  std::future<void> ready = started.get_future();
  e->thread_ = std::thread([raw = e.get(), &started] { raw->run(started); });
  try {
    ready.get();
  } catch (const std::exception& ex) {
    failed = ex.what();
    throw;  // ~MpiEngine joins the thread, which has ended
  }
  engine = std::move(e);
  return engine;
}

MpiEngine::~MpiEngine() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void MpiEngine::submit(std::unique_ptr<MpiOp> op) {
  {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(op));
    queued_.store(queue_.size(), std::memory_order_release);
  }
  cv_.notify_one();
}

MPI_Op MpiEngine::reduce_op(DataType dtype, ReduceOp op) const {
  const int i = op == ReduceOp::kProd ? 1 : op == ReduceOp::kMin ? 2 : op == ReduceOp::kMax ? 3 : 0;
  if (dtype == DataType::kFloat16) return half_ops_[0][i];
  if (dtype == DataType::kBFloat16) return half_ops_[1][i];
  static const MPI_Op kNative[] = {MPI_SUM, MPI_PROD, MPI_MIN, MPI_MAX};  // handles, not constants everywhere
  return kNative[i];
}

void MpiEngine::run(std::promise<void>& started) {
  try {
    start_mpi();
  } catch (...) {
    started.set_exception(std::current_exception());
    return;
  }
  started.set_value();  // `started` is gone from here on
  Clock::time_point last_end = Clock::now();
  for (;;) {
    {
      std::unique_lock lock(mu_);
      if (in_flight_.empty()) {
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) break;  // stopping, and nothing left
      }
    }
    if (queued_.load(std::memory_order_acquire) > 0) post_queued();
    if (test_in_flight()) {
      last_end = Clock::now();
    } else if (Clock::now() - last_end > kSpinFor) {
      std::this_thread::sleep_for(kNap);
    }
  }
  stop_mpi();
}

void MpiEngine::start_mpi() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized) throw Error("the mpi backend: MPI was already finalized in this process");
  if (initialized) {
    int level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&level);
    if (level < MPI_THREAD_MULTIPLE) {
      throw Error("the mpi backend: the program initialised MPI itself at thread level " +
                  std::to_string(level) + "; the backend calls MPI from a thread of its own, so "
                  "it needs MPI_THREAD_MULTIPLE then (or leave MPI_Init to the backend)");
    }
  } else {
    int provided = MPI_THREAD_SINGLE;
    check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided),
              "MPI_Init_thread");
    own_mpi_ = true;
    if (provided < MPI_THREAD_FUNNELED) {
      throw Error("the mpi backend: this MPI library gives thread level " +
                  std::to_string(provided) + " (MPI_THREAD_SINGLE); the backend needs "
                  "MPI_THREAD_FUNNELED or better, since the program has other threads");
    }
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
  int* ub = nullptr;
  int has = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &has);
  if (has && ub) tag_ub_ = *ub;
  make_half_ops<DataType::kFloat16>(half_ops_[0]);
  make_half_ops<DataType::kBFloat16>(half_ops_[1]);
}

// MPI_Finalize is collective and waits for the other ranks: it is skipped
// when an operation was abandoned (its peers may be gone), and when the
// program initialised MPI (its MPI_Finalize, then).
void MpiEngine::stop_mpi() {
  if (!abandoned_.empty() || !own_mpi_) return;
  for (auto& row : half_ops_) {
    for (MPI_Op& op : row) MPI_Op_free(&op);
  }
  MPI_Finalize();
}

// Posts every queued operation, in submit order (every rank posts a
// group's collectives in the same order, as MPI requires).
void MpiEngine::post_queued() {
  std::deque<std::unique_ptr<MpiOp>> batch;
  {
    std::lock_guard lock(mu_);
    batch.swap(queue_);
    queued_.store(0, std::memory_order_release);
  }
  const Clock::time_point now = Clock::now();
  for (auto& op : batch) {
    if (!op->comm->broken.empty()) {
      end(*op, failed_earlier(*op));
      continue;
    }
    op->deadline = now + op->comm->timeout;
    try {
      op->start(op->requests);
    } catch (const std::exception& e) {
      fail_group(*op->comm, e.what());
      end(*op, std::make_exception_ptr(Error(where(*op) + ": " + e.what())));
      abandoned_.push_back(std::move(op));  // anything it posted stays posted
      continue;
    }
    in_flight_.push_back(std::move(op));
  }
}

// Tests every operation in flight once; ends those done, failed or past
// their deadline. Returns whether any ended.
bool MpiEngine::test_in_flight() {
  const size_t before = in_flight_.size();
  const Clock::time_point now = Clock::now();
  std::vector<std::unique_ptr<MpiOp>> still;
  still.reserve(in_flight_.size());
  for (auto& op : in_flight_) {
    MpiOp& o = *op;
    if (!o.comm->broken.empty()) {  // another of its group's operations failed
      end(o, failed_earlier(o));
      abandoned_.push_back(std::move(op));
      continue;
    }
    int done = 0;
    const int rc = MPI_Testall(int(o.requests.size()), o.requests.data(), &done,
                               MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) {
      fail_group(*o.comm, mpi_error_text(rc));
      end(o, std::make_exception_ptr(Error(where(o) + ": " + o.comm->broken +
                                           "; a peer may have died")));
      abandoned_.push_back(std::move(op));
    } else if (done) {
      std::exception_ptr error;
      try {
        if (o.finish) o.finish();
      } catch (const std::exception& e) {
        fail_group(*o.comm, e.what());
        error = std::make_exception_ptr(Error(where(o) + ": " + e.what()));
      }
      end(o, error);
    } else if (now > o.deadline) {
      fail_group(*o.comm, "timed out after " + format_secs(o.comm->timeout));
      end(o, std::make_exception_ptr(TimeoutError(
                 where(o) + ": timed out after " + format_secs(o.comm->timeout) +
                 " waiting for the other ranks; MPI cannot cancel it, so the group is broken")));
      abandoned_.push_back(std::move(op));
    } else {
      still.push_back(std::move(op));
    }
  }
  in_flight_.swap(still);
  return in_flight_.size() < before;
}

void MpiEngine::end(MpiOp& op, std::exception_ptr error) {
  if (!error) op.ticket.complete();  // a failed call stays issued, not completed
  if (op.work) op.work->finish(error);
}

void MpiEngine::fail_group(MpiComm& comm, const std::string& why) {
  if (comm.broken.empty()) comm.broken = why.substr(0, 300);
}

}  // namespace ccrun::collectives
