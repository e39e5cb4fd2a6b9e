// What the backend chose or measured per configuration (a cuDNN engine, a cuBLASLt
// algorithm, an op's runtime), kept for the process and shared by its threads: keyed by
// a string that names the configuration (and the device where it matters).
#pragma once

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

namespace taso {
namespace cuda {

template <typename V>
class ConfigCache {
 public:
  ConfigCache() = default;
  explicit ConfigCache(std::map<std::string, V> initial) : map_(std::move(initial)) {}

  std::optional<V> find(const std::string& key) const {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = map_.find(key);
    if (it == map_.end()) return std::nullopt;
    return it->second;
  }
  void put(const std::string& key, V value) {
    std::lock_guard<std::mutex> lock(mutex_);
    map_[key] = std::move(value);
  }
  size_t size() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return map_.size();
  }

 private:
  mutable std::mutex mutex_;
  std::map<std::string, V> map_;
};

}  // namespace cuda
}  // namespace taso
