// One line for what many ranks print (see console_collapse.h).
#include "ccrun/console_collapse.h"

#include <unistd.h>

#include <algorithm>
#include <boost/asio/post.hpp>

#include "ccrun/rank_progress.h"
#include "worker_env.h"

namespace ccrun::agent {

using Clock = std::chrono::steady_clock;

size_t shown_local_ranks(size_t workers, const std::set<int>& filter) {
  if (filter.empty()) return workers;
  return size_t(std::count_if(filter.begin(), filter.end(),
                              [&](int lr) { return lr >= 0 && size_t(lr) < workers; }));
}

ConsoleCollapser::ConsoleCollapser(boost::asio::io_context& io, CollapseOptions options)
    : o_(std::move(options)), timer_(io), prefix_values_{{"role_name", o_.role}},
      out_(io, o_.console_fd) {}

ConsoleCollapser::~ConsoleCollapser() {
  *alive_ = false;
  flush_all();
}

void ConsoleCollapser::submit(int rank, int local_rank, std::string_view text) {
  uint64_t& last = last_seq_[rank];  // 0: none yet
  auto chain = open_.find(text);
  Entry* e = chain == open_.end() ? nullptr : join(chain->second, rank, last);
  if (!e) e = open_entry(text, chain);
  e->ranks.push_back(rank);
  e->local_ranks.push_back(local_rank);
  last = e->seq;
  if (e->ranks.size() >= o_.expected) flush_due();
}

// A new entry for `text`, last of its chain (`chain`: the text's, or end)
// and of the queue.
ConsoleCollapser::Entry* ConsoleCollapser::open_entry(std::string_view text, OpenMap::iterator chain) {
  std::unique_ptr<Entry> e = new_entry(text);
  Entry* entry = e.get();
  if (chain == open_.end()) {
    open_.emplace(entry->text, Chain{entry, entry});
  } else {
    chain->second.newest->next_same = entry;
    chain->second.newest = entry;
  }
  queue_.push_back(std::move(e));
  if (queue_.size() == 1) arm();  // a new head
  return entry;
}

// The earliest entry of the chain that `rank` may join: after its own
// pending entries (its earlier lines must come out first) and without it.
ConsoleCollapser::Entry* ConsoleCollapser::join(const Chain& chain, int rank, uint64_t after) const {
  for (Entry* e = chain.oldest; e; e = e->next_same) {
    if (e->seq <= after || std::find(e->ranks.begin(), e->ranks.end(), rank) != e->ranks.end()) {
      continue;
    }
    return e;
  }
  return nullptr;
}

std::unique_ptr<ConsoleCollapser::Entry> ConsoleCollapser::new_entry(std::string_view text) {
  std::unique_ptr<Entry> e;
  if (spare_.empty()) {
    e = std::make_unique<Entry>();
    size_t room = std::min<size_t>(o_.expected, 64);  // the ranks that will join, up to a bound
    e->ranks.reserve(room);
    e->local_ranks.reserve(room);
  } else {
    e = std::move(spare_.back());
    spare_.pop_back();
  }
  e->seq = next_seq_++;
  e->text.assign(text);
  e->first = Clock::now();
  return e;
}

void ConsoleCollapser::retire(std::unique_ptr<Entry> e) {
  if (spare_.size() >= 256) return;  // a burst's worth kept; the rest freed
  e->ranks.clear();
  e->local_ranks.clear();
  e->next_same = nullptr;
  spare_.push_back(std::move(e));
}

void ConsoleCollapser::flush_due() {
  auto now = Clock::now();
  bool popped = false;
  while (!queue_.empty()) {
    Entry& head = *queue_.front();
    if (head.ranks.size() < o_.expected && now - head.first < o_.window) break;
    print(head);
    // The head is the oldest entry of all, so the oldest of its text.
    auto chain = open_.find(std::string_view(head.text));
    if (head.next_same) {
      auto node = open_.extract(chain);  // re-keyed on the next one's text: no allocation
      node.key() = head.next_same->text;
      node.mapped().oldest = head.next_same;
      open_.insert(std::move(node));
    } else {
      open_.erase(chain);
    }
    retire(std::move(queue_.front()));
    queue_.pop_front();
    popped = true;
  }
  if (popped) arm();
}

// Every pending entry, in order, after what print() already holds.
void ConsoleCollapser::flush_all() {
  open_.clear();
  while (!queue_.empty()) {
    print(*queue_.front());
    queue_.pop_front();
  }
  out_.flush();
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
    prefix_values_["rank"] = one ? std::to_string(e.ranks[0]) : compress_ranks(e.ranks);
    prefix_values_["local_rank"] =
        one ? std::to_string(e.local_ranks[0]) : compress_ranks(e.local_ranks);
    prefix = substitute_macros(o_.prefix_template, prefix_values_);
  }
  std::string out;
  size_t start = 0;
  for (;;) {  // each line of a traceback with the same prefix
    size_t nl = e.text.find('\n', start);
    out += prefix;
    out.append(e.text, start, nl == std::string::npos ? std::string::npos : nl - start);
    out += '\n';
    if (nl == std::string::npos) break;
    start = nl + 1;
  }
  out_.append(out);  // written once the read that made it due is done
  ++written_;
}

}  // namespace ccrun::agent
