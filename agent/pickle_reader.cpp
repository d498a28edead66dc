// Python pickles of plain data, as JSON (see pickle_reader.h).
#include "pickle_reader.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ccrun::agent {
namespace {

using nlohmann::json;

// A value while the pickle is read: lists and dicts are filled after the
// memo took them, so every reference shares one.
struct Value {
  enum class Kind { kScalar, kList, kDict } kind = Kind::kScalar;
  json scalar;
  std::vector<std::shared_ptr<Value>> items;
  std::vector<std::pair<std::shared_ptr<Value>, std::shared_ptr<Value>>> entries;
};
using Ref = std::shared_ptr<Value>;

Ref scalar(json j) {
  auto v = std::make_shared<Value>();
  v->scalar = std::move(j);
  return v;
}

Ref container(Value::Kind kind) {
  auto v = std::make_shared<Value>();
  v->kind = kind;
  return v;
}

constexpr int kMaxDepth = 100;
// Values shared through the memo are copied where each is referenced: a
// small pickle can reference a list twice at every level. The JSON is
// bounded, not the pickle.
constexpr size_t kMaxValues = 4'000'000;  // 2,000 collectives with 40-frame stacks: ~700,000

json to_json(const Value& v, int depth, size_t& left) {
  if (depth > kMaxDepth) throw PickleError("nested deeper than 100 (or a cycle)");
  if (left-- == 0) throw PickleError("more than 4,000,000 values once shared ones are copied");
  switch (v.kind) {
    case Value::Kind::kScalar: return v.scalar;
    case Value::Kind::kList: {
      json out = json::array();
      for (const auto& i : v.items) out.push_back(to_json(*i, depth + 1, left));
      return out;
    }
    case Value::Kind::kDict: break;
  }
  json out = json::object();
  for (const auto& [k, val] : v.entries) {
    json key = to_json(*k, depth + 1, left);
    out[key.is_string() ? key.get<std::string>() : key.dump()] = to_json(*val, depth + 1, left);
  }
  return out;
}

class Reader {
 public:
  explicit Reader(std::string_view bytes) : in_(bytes) {}
  // A pickle may hold a container in itself (through the memo): the
  // containers' references are dropped here, so that such cycles are freed.
  ~Reader() {
    for (const auto& c : containers_) c->items.clear(), c->entries.clear();
  }
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  // A new container, remembered for the destructor.
  Ref made(Value::Kind kind) {
    containers_.push_back(container(kind));
    return containers_.back();
  }

  json read() {
    for (;;) {
      uint8_t op = take_u8();
      if (op == '.') {  // STOP
        if (stack_.size() != 1) throw PickleError("STOP with " + std::to_string(stack_.size()) + " values");
        size_t left = kMaxValues;
        return to_json(*stack_.back(), 0, left);
      }
      step(op);
    }
  }

 private:
  void step(uint8_t op) {
    switch (op) {
      case 0x80: take(1); return;  // PROTO
      case 0x95: take(8); return;  // FRAME: its length only
      case '(': marks_.push_back(stack_.size()); return;
      case '0': top(), stack_.pop_back(); return;  // POP
      case 'N': push(scalar(nullptr)); return;
      case 0x88: push(scalar(true)); return;
      case 0x89: push(scalar(false)); return;
      case 'J': push(scalar(int64_t(int32_t(little(4))))); return;
      case 'K': push(scalar(int64_t(little(1)))); return;
      case 'M': push(scalar(int64_t(little(2)))); return;
      case 0x8a: push(scalar(long_int(little(1)))); return;  // LONG1
      case 0x8b: push(scalar(long_int(little(4)))); return;  // LONG4
      case 'G': push(scalar(big_double())); return;
      case 'X': case 'T': push(scalar(std::string(take(little(4))))); return;
      case 0x8c: case 'U': push(scalar(std::string(take(little(1))))); return;
      case 0x8d: push(scalar(std::string(take(little(8))))); return;
      case ']': push(made(Value::Kind::kList)); return;
      case ')': push(made(Value::Kind::kList)); return;
      case '}': push(made(Value::Kind::kDict)); return;
      case 'l': case 't': push(collect(pop_mark(), Value::Kind::kList)); return;
      case 'd': push(collect(pop_mark(), Value::Kind::kDict)); return;
      case 0x85: case 0x86: case 0x87: push(collect(stack_.size() - (op - 0x84), Value::Kind::kList)); return;
      case 'a': append(stack_.size() - 1); return;
      case 'e': append(pop_mark()); return;
      case 's': set_items(stack_.size() - 2); return;
      case 'u': set_items(pop_mark()); return;
      case 'q': memo_[little(1)] = top(); return;
      case 'r': memo_[little(4)] = top(); return;
      case 0x94: memo_[memo_.size()] = top(); return;  // MEMOIZE
      case 'h': push(get(little(1))); return;
      case 'j': push(get(little(4))); return;
      default: break;
    }
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%02x", op);
    throw PickleError(std::string("opcode ") + hex + " at byte " + std::to_string(pos_ - 1) +
                      " is not plain data (a class, a global or bytes)");
  }

  uint8_t take_u8() { return uint8_t(take(1)[0]); }

  std::string_view take(uint64_t n) {
    if (n > in_.size() - pos_) throw PickleError("truncated at byte " + std::to_string(pos_));
    std::string_view s = in_.substr(pos_, n);
    pos_ += n;
    return s;
  }

  uint64_t little(int n) {
    std::string_view b = take(uint64_t(n));
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | uint8_t(b[size_t(i)]);
    return v;
  }

  // A two's-complement little-endian integer of `n` bytes.
  int64_t long_int(uint64_t n) {
    if (n > 8) throw PickleError("an integer of " + std::to_string(n) + " bytes at byte " + std::to_string(pos_));
    if (n == 0) return 0;
    uint64_t v = little(int(n));
    if (n < 8 && (v >> (8 * n - 1)) & 1) v |= ~uint64_t(0) << (8 * n);  // sign-extend
    return int64_t(v);
  }

  double big_double() {
    std::string_view b = take(8);
    uint64_t bits = 0;
    for (char c : b) bits = (bits << 8) | uint8_t(c);
    double d;
    std::memcpy(&d, &bits, sizeof d);
    return d;
  }

  void push(Ref v) { stack_.push_back(std::move(v)); }

  Ref top() {
    if (stack_.empty()) throw PickleError("an empty stack at byte " + std::to_string(pos_));
    return stack_.back();
  }

  Ref get(uint64_t key) {
    auto it = memo_.find(key);
    if (it == memo_.end()) throw PickleError("memo GET of an unknown key " + std::to_string(key));
    return it->second;
  }

  size_t pop_mark() {
    if (marks_.empty() || marks_.back() > stack_.size()) throw PickleError("no MARK at byte " + std::to_string(pos_));
    size_t m = marks_.back();
    marks_.pop_back();
    return m;
  }

  void need(size_t from) const {
    if (from > stack_.size()) throw PickleError("stack underflow at byte " + std::to_string(pos_));
  }

  // The values above `from`, taken off the stack into a new list or dict.
  Ref collect(size_t from, Value::Kind kind) {
    need(from);
    auto v = made(kind);
    std::vector<Ref> values(stack_.begin() + long(from), stack_.end());
    stack_.resize(from);
    if (kind == Value::Kind::kList) {
      v->items = std::move(values);
    } else {
      if (values.size() % 2) throw PickleError("a dict of an odd number of values");
      for (size_t i = 0; i < values.size(); i += 2) v->entries.emplace_back(values[i], values[i + 1]);
    }
    return v;
  }

  // The values above `from` appended to the list just below them.
  void append(size_t from) {
    if (from == 0) throw PickleError("APPEND without a list at byte " + std::to_string(pos_));
    need(from);
    Value& list = *stack_[from - 1];
    if (list.kind != Value::Kind::kList) throw PickleError("APPEND to a value that is not a list");
    list.items.insert(list.items.end(), stack_.begin() + long(from), stack_.end());
    stack_.resize(from);
  }

  void set_items(size_t from) {
    if (from == 0 || from > stack_.size() || (stack_.size() - from) % 2) {
      throw PickleError("SETITEM without a dict and key-value pairs at byte " + std::to_string(pos_));
    }
    Value& dict = *stack_[from - 1];
    if (dict.kind != Value::Kind::kDict) throw PickleError("SETITEM on a value that is not a dict");
    for (size_t i = from; i < stack_.size(); i += 2) dict.entries.emplace_back(stack_[i], stack_[i + 1]);
    stack_.resize(from);
  }

  std::string_view in_;
  size_t pos_ = 0;
  std::vector<Ref> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, Ref> memo_;
  std::vector<Ref> containers_;  // every container made, for the destructor
};

}  // namespace

json read_pickle(std::string_view bytes) { return Reader(bytes).read(); }

}  // namespace ccrun::agent
