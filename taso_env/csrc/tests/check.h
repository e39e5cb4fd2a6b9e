// A minimal test harness for the C++ unit tests (no third-party framework is
// available offline). Each test is a function registered with TEST(name); main runs
// them all and returns non-zero if any check failed.
#pragma once

#include <cmath>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

namespace check {

struct Registry {
  std::vector<std::pair<std::string, std::function<void()>>> tests;
  int failures = 0;
  static Registry& get() {
    static Registry r;
    return r;
  }
};

struct Register {
  Register(const char* name, std::function<void()> fn) { Registry::get().tests.emplace_back(name, fn); }
};

inline void fail(const char* file, int line, const std::string& what) {
  ++Registry::get().failures;
  std::cerr << file << ":" << line << ": FAILED: " << what << "\n";
}

inline int run_all() {
  int failed_tests = 0;
  for (auto& [name, fn] : Registry::get().tests) {
    int before = Registry::get().failures;
    try {
      fn();
    } catch (const std::exception& e) {
      fail(name.c_str(), 0, std::string("unexpected exception: ") + e.what());
    }
    bool ok = Registry::get().failures == before;
    failed_tests += ok ? 0 : 1;
    std::cout << (ok ? "[ OK ] " : "[FAIL] ") << name << "\n";
  }
  std::cout << (Registry::get().tests.size() - failed_tests) << " passed, " << failed_tests << " failed\n";
  return failed_tests == 0 ? 0 : 1;
}

}  // namespace check

#define TEST(name)                                                \
  static void name();                                             \
  static check::Register register_##name(#name, name);            \
  static void name()

#define CHECK(cond) \
  do { if (!(cond)) check::fail(__FILE__, __LINE__, #cond); } while (0)

#define CHECK_EQ(a, b)                                                                  \
  do {                                                                                  \
    if (!((a) == (b))) check::fail(__FILE__, __LINE__, #a " == " #b);                   \
  } while (0)

#define CHECK_NEAR(a, b, tol)                                                           \
  do {                                                                                  \
    if (std::fabs((a) - (b)) > (tol))                                                   \
      check::fail(__FILE__, __LINE__, #a " ~= " #b " (" + std::to_string(a) + " vs " +  \
                                          std::to_string(b) + ")");                     \
  } while (0)

// Checks that `stmt` throws `Exc` whose message contains `fragment`.
#define CHECK_THROWS(stmt, Exc, fragment)                                               \
  do {                                                                                  \
    bool caught = false;                                                                \
    try { stmt; } catch (const Exc& e) {                                                \
      caught = true;                                                                    \
      if (std::string(e.what()).find(fragment) == std::string::npos)                    \
        check::fail(__FILE__, __LINE__, std::string("message '") + e.what() +           \
                                            "' lacks '" + fragment + "'");              \
    } catch (const std::exception& e) {                                                 \
      caught = true;                                                                    \
      check::fail(__FILE__, __LINE__, std::string("wrong exception: ") + e.what());     \
    }                                                                                   \
    if (!caught) check::fail(__FILE__, __LINE__, #stmt " did not throw " #Exc);         \
  } while (0)

#define TEST_MAIN() int main() { return check::run_all(); }
