// One line for what many ranks print (see console_collapse.h).
#include "ccrun/console_collapse.h"

#include <unistd.h>

#include <algorithm>

#include "ccrun/rank_progress.h"
#include "worker_env.h"

namespace ccrun::agent {

using Clock = std::chrono::steady_clock;

ConsoleCollapser::ConsoleCollapser(boost::asio::io_context& io, CollapseOptions options)
    : io_(io), o_(std::move(options)), timer_(io) {}

ConsoleCollapser::~ConsoleCollapser() {
  *alive_ = false;
  flush_all();
}

void ConsoleCollapser::submit(int rank, int local_rank, const std::string& text) {
  auto seen = last_seq_.find(rank);
  uint64_t after = seen == last_seq_.end() ? 0 : seen->second;
  auto& same = open_[text];
  for (auto& e : same) {
    // Its own earlier lines must come out first: only an entry after them.
    if (e->seq <= after || std::find(e->ranks.begin(), e->ranks.end(), rank) != e->ranks.end()) {
      continue;
    }
    e->ranks.push_back(rank);
    e->local_ranks.push_back(local_rank);
    last_seq_[rank] = e->seq;
    if (e->ranks.size() >= o_.expected) flush_due();
    return;
  }
  auto e = std::make_shared<Entry>();
  e->seq = next_seq_++;
  e->text = text;
  e->ranks = {rank};
  e->local_ranks = {local_rank};
  e->first = Clock::now();
  same.push_back(e);
  queue_.push_back(e);
  last_seq_[rank] = e->seq;
  if (queue_.size() == 1) arm();  // a new head
  if (o_.expected <= 1) flush_due();
}

void ConsoleCollapser::flush_due() {
  auto now = Clock::now();
  bool popped = false;
  while (!queue_.empty()) {
    auto& head = queue_.front();
    if (head->ranks.size() < o_.expected && now - head->first < o_.window) break;
    print(*head);
    head->printed = true;
    auto& same = open_[head->text];
    same.erase(std::remove(same.begin(), same.end(), head), same.end());
    if (same.empty()) open_.erase(head->text);
    queue_.pop_front();
    popped = true;
  }
  if (popped) arm();
}

void ConsoleCollapser::flush_all() {
  while (!queue_.empty()) {
    print(*queue_.front());
    queue_.pop_front();
  }
  open_.clear();
}

void ConsoleCollapser::arm() {
  if (queue_.empty()) {
    timer_.cancel();
    return;
  }
  timer_.expires_at(queue_.front()->first + o_.window);
  timer_.async_wait([this, alive = alive_](boost::system::error_code ec) {
    if (ec || !*alive) return;
    flush_due();
  });
}

void ConsoleCollapser::print(const Entry& e) {
  std::string prefix;
  if (!o_.prefix_template.empty()) {
    bool one = e.ranks.size() == 1;
    prefix = substitute_macros(
        o_.prefix_template,
        {{"role_name", o_.role},
         {"rank", one ? std::to_string(e.ranks[0]) : compress_ranks(e.ranks)},
         {"local_rank", one ? std::to_string(e.local_ranks[0]) : compress_ranks(e.local_ranks)}});
  }
  std::string out;
  size_t start = 0;
  for (;;) {  // each line of a traceback with the same prefix, in one write
    size_t nl = e.text.find('\n', start);
    out += prefix;
    out.append(e.text, start, nl == std::string::npos ? std::string::npos : nl - start);
    out += '\n';
    if (nl == std::string::npos) break;
    start = nl + 1;
  }
  (void)write_all(o_.console_fd, out);  // a closed console must not stop the job
  ++written_;
}

}  // namespace ccrun::agent
