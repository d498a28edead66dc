// FileStore: a Store in a file shared by processes (see
// include/ccrun/file_store.h). Needs _GNU_SOURCE for F_OFD_SETLKW. Record format, little-endian:
//   u8 op (0 = set, 1 = delete) | u64 key length | key | u64 value length | value
#include "ccrun/file_store.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "ccrun/error.h"
#include "store_util.h"

namespace ccrun::store {
namespace {

constexpr uint8_t kOpSet = 0;
constexpr uint8_t kOpDelete = 1;

}  // namespace

// An fcntl lock on the whole file, plus the in-process mutex. Open file
// description locks (F_OFD_*) belong to this descriptor, so two FileStores
// on one file exclude each other inside one process too.
class FileStore::Lock {
 public:
  Lock(FileStore& s, bool exclusive) : s_(s), guard_(s.mu_) {
    flock fl{};
    fl.l_type = exclusive ? F_WRLCK : F_RDLCK;
    fl.l_whence = SEEK_SET;
    while (fcntl(s_.fd_, F_OFD_SETLKW, &fl) != 0) {
      if (errno != EINTR) {
        throw Error("file store " + s_.path_ + ": cannot lock the file: " +
                    std::strerror(errno) +
                    "; does its filesystem support fcntl locks?");
      }
    }
  }
  ~Lock() {
    flock fl{};
    fl.l_type = F_UNLCK;
    fl.l_whence = SEEK_SET;
    fcntl(s_.fd_, F_OFD_SETLK, &fl);
  }

 private:
  FileStore& s_;
  std::lock_guard<std::mutex> guard_;
};

FileStore::FileStore(std::string path, std::chrono::milliseconds timeout)
    : Store(timeout), path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    throw Error("file store " + path_ + ": cannot open: " + std::strerror(errno) +
                "; check that the directory exists and is writable");
  }
  inotify_fd_ = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (inotify_fd_ >= 0 &&
      inotify_add_watch(inotify_fd_, path_.c_str(), IN_MODIFY) < 0) {
    ::close(inotify_fd_);
    inotify_fd_ = -1;
  }
}

FileStore::~FileStore() {
  if (inotify_fd_ >= 0) ::close(inotify_fd_);
  if (fd_ >= 0) ::close(fd_);
}

void FileStore::refresh_locked() {
  struct stat st {};
  if (fstat(fd_, &st) != 0) {
    throw Error("file store " + path_ + ": cannot stat: " + std::strerror(errno));
  }
  uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < offset_) {  // the file was truncated or replaced: start over
    map_.clear();
    offset_ = 0;
  }
  if (size == offset_) return;
  std::string buf(size - offset_, '\0');
  size_t got = 0;
  while (got < buf.size()) {
    ssize_t n = pread(fd_, buf.data() + got, buf.size() - got, offset_ + got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  size_t pos = 0;
  auto read_u64 = [&](uint64_t& v) {
    if (got - pos < sizeof v) return false;
    std::memcpy(&v, buf.data() + pos, sizeof v);
    pos += sizeof v;
    return true;
  };
  for (;;) {
    size_t start = pos;
    if (got - pos < 1) break;
    uint8_t op = static_cast<uint8_t>(buf[pos++]);
    uint64_t klen = 0, vlen = 0;
    if (!read_u64(klen) || got - pos < klen) { pos = start; break; }
    std::string key = buf.substr(pos, klen);
    pos += klen;
    if (!read_u64(vlen) || got - pos < vlen) { pos = start; break; }
    if (op == kOpSet) {
      map_[std::move(key)] = buf.substr(pos, vlen);
    } else if (op == kOpDelete) {
      map_.erase(key);
    } else {
      throw Error("file store " + path_ + ": record of unknown type " +
                  std::to_string(op) + " at byte " + std::to_string(offset_ + start) +
                  "; is this file a ccrun file store?");
    }
    pos += vlen;
  }
  offset_ += pos;
}

void FileStore::write_record_locked(uint8_t op, const std::string& key,
                                    const std::string& value) {
  std::string rec;
  rec.reserve(1 + 16 + key.size() + value.size());
  rec.push_back(static_cast<char>(op));
  uint64_t klen = key.size(), vlen = value.size();
  rec.append(reinterpret_cast<const char*>(&klen), sizeof klen);
  rec.append(key);
  rec.append(reinterpret_cast<const char*>(&vlen), sizeof vlen);
  rec.append(value);
  struct stat st {};
  fstat(fd_, &st);
  uint64_t at = static_cast<uint64_t>(st.st_size);
  size_t done = 0;
  while (done < rec.size()) {
    ssize_t n = pwrite(fd_, rec.data() + done, rec.size() - done, at + done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      throw Error("file store " + path_ + ": cannot write: " + std::strerror(errno));
    }
    done += static_cast<size_t>(n);
  }
  refresh_locked();
}

void FileStore::set(const std::string& key, const std::string& value) {
  Lock lock(*this, true);
  write_record_locked(kOpSet, key, value);
}

std::string FileStore::get(const std::string& key) {
  return std::move(multi_get({key})[0]);
}

int64_t FileStore::add(const std::string& key, int64_t delta) {
  Lock lock(*this, true);
  refresh_locked();
  auto it = map_.find(key);
  int64_t value =
      add_or_throw(key, it == map_.end() ? std::string_view() : std::string_view(it->second), delta);
  write_record_locked(kOpSet, key, std::to_string(value));
  return value;
}

std::string FileStore::compare_set(const std::string& key,
                                   const std::string& expected,
                                   const std::string& desired) {
  Lock lock(*this, true);
  refresh_locked();
  auto it = map_.find(key);
  const std::string* now = it == map_.end() ? nullptr : &it->second;
  std::string reply = compare_set_reply(now, expected, desired);
  if (compare_set_writes(now, expected)) write_record_locked(kOpSet, key, desired);
  return reply;
}

bool FileStore::all_present(const std::vector<std::string>& keys) {
  Lock lock(*this, false);
  refresh_locked();
  for (const auto& k : keys) {
    if (!map_.count(k)) return false;
  }
  return true;
}

bool FileStore::check(const std::vector<std::string>& keys) {
  return all_present(keys);
}

void FileStore::wait(const std::vector<std::string>& keys,
                     std::chrono::milliseconds timeout) {
  using Clock = std::chrono::steady_clock;
  auto deadline = Clock::now() + timeout;
  while (!all_present(keys)) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - Clock::now());
    if (left.count() <= 0) {
      throw TimeoutError("file store " + path_ + ": timed out after " +
                         format_duration(timeout) + " waiting for key" +
                         (keys.size() == 1 ? " " : "s ") + quote_keys(keys));
    }
    if (inotify_fd_ >= 0) {
      // Sleep until another process (or thread) writes the file. The cap
      // covers writes that land between the check above and this poll.
      pollfd p{inotify_fd_, POLLIN, 0};
      int ms = static_cast<int>(std::min<int64_t>(left.count(), 1000));
      if (::poll(&p, 1, ms) > 0) {
        char events[4096];
        while (::read(inotify_fd_, events, sizeof events) > 0) {
        }
      }
    } else {
      ::poll(nullptr, 0, static_cast<int>(std::min<int64_t>(left.count(), 10)));
    }
  }
}

bool FileStore::delete_key(const std::string& key) {
  Lock lock(*this, true);
  refresh_locked();
  if (!map_.count(key)) return false;
  write_record_locked(kOpDelete, key, {});
  return true;
}

int64_t FileStore::num_keys() {
  Lock lock(*this, false);
  refresh_locked();
  return static_cast<int64_t>(map_.size());
}

void FileStore::append(const std::string& key, const std::string& value) {
  Lock lock(*this, true);
  refresh_locked();
  auto it = map_.find(key);
  write_record_locked(kOpSet, key, (it == map_.end() ? std::string() : it->second) + value);
}

std::vector<std::string> FileStore::multi_get(const std::vector<std::string>& keys) {
  wait(keys, timeout());
  Lock lock(*this, false);
  refresh_locked();
  std::vector<std::string> values;
  values.reserve(keys.size());
  for (const auto& k : keys) {
    auto it = map_.find(k);
    values.push_back(it == map_.end() ? std::string() : it->second);
  }
  return values;
}

void FileStore::multi_set(const std::vector<std::string>& keys,
                          const std::vector<std::string>& values) {
  if (keys.size() != values.size()) {
    throw Error("file store " + path_ + ": multi_set got " + std::to_string(keys.size()) +
                " keys and " + std::to_string(values.size()) + " values; pass one value per key");
  }
  Lock lock(*this, true);
  for (size_t i = 0; i < keys.size(); ++i) write_record_locked(kOpSet, keys[i], values[i]);
}

}  // namespace ccrun::store
