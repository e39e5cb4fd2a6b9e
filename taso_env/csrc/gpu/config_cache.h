// What the backend chose or measured per configuration (a cuDNN engine, a cuBLASLt
// algorithm, an op's runtime), kept for the process and shared by its threads: keyed by
// a string that names the configuration (and the device where it matters).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstring>
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

// Choices persisted between processes: a file of "key<TAB>value" lines, named by the
// environment variable `env` (unset or empty: no file). Read once where a cache is
// first used; each new choice appended. C stdio, not iostreams: the module shares its
// process with other C++ runtimes. A line without a tab is skipped.
inline const char* choice_file(const char* env) {
  const char* p = std::getenv(env);
  return p && *p ? p : nullptr;
}

inline std::map<std::string, std::string> read_choices(const char* env) {
  std::map<std::string, std::string> out;
  const char* path = choice_file(env);
  FILE* f = path ? std::fopen(path, "r") : nullptr;
  if (!f) return out;
  char line[4096];
  while (std::fgets(line, sizeof line, f)) {
    char* tab = std::strchr(line, '\t');
    if (!tab) continue;
    std::string value(tab + 1);
    while (!value.empty() && (value.back() == '\n' || value.back() == '\r')) value.pop_back();
    out[std::string(line, tab)] = value;
  }
  std::fclose(f);
  return out;
}

inline void append_choice(const char* env, const std::string& key, const std::string& value) {
  const char* path = choice_file(env);
  FILE* f = path ? std::fopen(path, "a") : nullptr;
  if (!f) return;
  std::fprintf(f, "%s\t%s\n", key.c_str(), value.c_str());
  std::fclose(f);
}

}  // namespace cuda
}  // namespace taso
