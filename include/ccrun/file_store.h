//===- ccrun/file_store.h - A Store in a shared file ------------*- C++ -*-===//
//
// `FileStore` keeps its keys in one file that every process of a job opens
// (a path on a shared filesystem for several machines; file:// init). The
// file is an append-only log of records, written under an exclusive fcntl
// lock and replayed by each reader from where it last stopped. A blocked
// get/wait sleeps on inotify events of the file, not on a timer.
//
//   FileStore store("/shared/job7.store");
//   store.add("arrived", 1);
//
// The file grows with every write (a delete is a record too): it is meant
// for bootstrapping, not as a database. Remove it when the job is over.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <mutex>
#include <string>
#include <unordered_map>

#include "ccrun/store.h"

namespace ccrun::store {

class FileStore : public Store {
 public:
  // Opens (creating if needed) the file at `path`. Throws ccrun::Error
  // naming the path when it cannot.
  explicit FileStore(std::string path,
                     std::chrono::milliseconds timeout = kDefaultStoreTimeout);
  ~FileStore() override;
  FileStore(const FileStore&) = delete;  // owns a descriptor and a watch

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            std::chrono::milliseconds timeout) override;
  using Store::wait;
  bool delete_key(const std::string& key) override;
  int64_t num_keys() override;
  void append(const std::string& key, const std::string& value) override;
  std::vector<std::string> multi_get(
      const std::vector<std::string>& keys) override;
  void multi_set(const std::vector<std::string>& keys,
                 const std::vector<std::string>& values) override;

  const std::string& path() const { return path_; }

 private:
  class Lock;
  // Replays records appended since the last refresh; caller holds a lock.
  void refresh_locked();
  void write_record_locked(uint8_t op, const std::string& key,
                           const std::string& value);
  bool all_present(const std::vector<std::string>& keys);

  std::string path_;
  int fd_ = -1;
  int inotify_fd_ = -1;  // -1 when inotify is unavailable
  std::mutex mu_;        // threads of this process; fcntl locks the others
  uint64_t offset_ = 0;  // bytes of the file already replayed
  std::unordered_map<std::string, std::string> map_;
};

}  // namespace ccrun::store
