// Read connections beside the store's writer (WAL snapshots); a connection
// serves one caller at a time and keeps its prepared statements between calls.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "store/schema.h"
#include "store/sqlite.h"

namespace tocl::directory {

class ReaderPool {
 public:
  ReaderPool(std::string path, int64_t cache_kib) : path_(std::move(path)), cache_kib_(cache_kib) {}

  class Lease {
   public:
    Lease(ReaderPool* pool, std::unique_ptr<Database> db) : pool_(pool), db_(std::move(db)) {}
    Lease(Lease&&) = default;
    ~Lease() {
      if (db_) pool_->Release(std::move(db_));
    }
    Database& db() { return *db_; }

   private:
    ReaderPool* pool_;
    std::unique_ptr<Database> db_;
  };

  Result<Lease> Acquire() {
    {
      std::lock_guard lock(mu_);
      if (!idle_.empty()) {
        auto db = std::move(idle_.back());
        idle_.pop_back();
        return Lease(this, std::move(db));
      }
    }
    TOCL_ASSIGN_OR_RETURN(Database db, Database::Open(path_, OpenMode::kReadWrite));
    TOCL_RETURN_IF_ERROR(ConfigureConnection(db, cache_kib_));
    TOCL_RETURN_IF_ERROR(db.Exec("PRAGMA query_only=1"));
    return Lease(this, std::make_unique<Database>(std::move(db)));
  }

 private:
  // Idle connections beyond this are closed: a burst of concurrent readers
  // must not keep its page caches forever.
  static constexpr size_t kMaxIdle = 8;

  void Release(std::unique_ptr<Database> db) {
    std::lock_guard lock(mu_);
    if (idle_.size() < kMaxIdle) idle_.push_back(std::move(db));
  }

  const std::string path_;
  const int64_t cache_kib_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Database>> idle_;  // guarded by mu_
};

}  // namespace tocl::directory
