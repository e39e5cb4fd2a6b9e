// Typed exceptions of the C++ core. Every message names the op, rule or file at fault.
// The Cython layer maps each kind onto the matching class in taso_env.errors.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

namespace taso {

enum ErrorKind : int {
  kErrGeneric = 0,
  kErrShape = 1,      // inconsistent or invalid tensor shapes
  kErrAttribute = 2,  // missing, unknown or invalid op attribute
  kErrGraph = 3,      // bad tensor reference, duplicate name, bad output
  kErrCycle = 4,      // a cycle in the op dependencies
  kErrUnknownOp = 5,  // op type not known to the core
  kErrValue = 6,      // other invalid argument
  kErrIndex = 7,      // index out of range
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message)
      : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

class ShapeError : public Error {
 public:
  explicit ShapeError(const std::string& m) : Error(kErrShape, m) {}
};
class AttributeError : public Error {
 public:
  explicit AttributeError(const std::string& m) : Error(kErrAttribute, m) {}
};
class GraphError : public Error {
 public:
  explicit GraphError(const std::string& m) : Error(kErrGraph, m) {}
};
class CycleError : public Error {
 public:
  explicit CycleError(const std::string& m) : Error(kErrCycle, m) {}
};
class UnknownOpError : public Error {
 public:
  explicit UnknownOpError(const std::string& m) : Error(kErrUnknownOp, m) {}
};
class ValueError : public Error {
 public:
  explicit ValueError(const std::string& m) : Error(kErrValue, m) {}
};
class IndexError : public Error {
 public:
  explicit IndexError(const std::string& m) : Error(kErrIndex, m) {}
};

// Called inside a catch block: rethrows the active exception and returns its kind
// and message (used by the Cython exception translator).
std::pair<int, std::string> classify_current_exception();

}  // namespace taso
