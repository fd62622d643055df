// Status and StatusOr: the error values of sluice.
//
// Anything a user, a file or the environment can cause (bad flags, malformed model
// files, I/O failures, impossible budgets) is reported as a Status, never an
// exception or a crash. CHECK (src/base/check.h) is for internal invariants only.
// Both types are plain values: cheap to move, safe to pass between threads.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>
#include <utility>

#include <fmt/format.h>

namespace sluice {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,   // the caller passed something unusable (flag, request)
  kNotFound,          // a file, key, tensor or model that does not exist
  kDataLoss,          // a file is truncated, corrupt or lies about its sizes
  kUnimplemented,     // a valid input sluice does not support (arch, dtype)
  kResourceExhausted, // a budget or limit was exceeded
  kIoError,           // the OS refused a read/write/open/mmap
  kInternal,          // a bug: an invariant that should have held did not
  kUnavailable,       // another process of the job failed or did not answer in time
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok_status() { return Status(); }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "<code name>: <message>", or "OK".
  std::string to_string() const;
  // Returns a copy whose message is prefixed with `context: `.
  Status with_context(const std::string& context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

template <typename... Args>
Status invalid_argument(fmt::format_string<Args...> f, Args&&... args) {
  return Status(StatusCode::kInvalidArgument, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status not_found(fmt::format_string<Args...> f, Args&&... args) {
  return Status(StatusCode::kNotFound, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status data_loss(fmt::format_string<Args...> f, Args&&... args) {
  return Status(StatusCode::kDataLoss, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status unimplemented(fmt::format_string<Args...> f, Args&&... args) {
  return Status(StatusCode::kUnimplemented, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status resource_exhausted(fmt::format_string<Args...> f, Args&&... args) {
  return Status(StatusCode::kResourceExhausted, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status io_error(fmt::format_string<Args...> f, Args&&... args) {
  return Status(StatusCode::kIoError, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status unavailable(fmt::format_string<Args...> f, Args&&... args) {
  return Status(StatusCode::kUnavailable, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status internal_error(fmt::format_string<Args...> f, Args&&... args) {
  return Status(StatusCode::kInternal, fmt::format(f, std::forward<Args>(args)...));
}

// Either a T or a non-OK Status. Accessing value() of an error aborts (a bug).
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT: implicit by design
    if (status_.ok()) status_ = Status(StatusCode::kInternal, "StatusOr built from OK status");
  }
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { check_ok(); return *value_; }
  const T& value() const& { check_ok(); return *value_; }
  T&& value() && { check_ok(); return std::move(*value_); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  void check_ok() const {
    if (!status_.ok()) {
      fmt::print(stderr, "fatal: StatusOr::value() on error: {}\n", status_.to_string());
      std::abort();
    }
  }
  Status status_;
  std::optional<T> value_;
};

}  // namespace sluice

#define SLUICE_CONCAT_INNER(a, b) a##b
#define SLUICE_CONCAT(a, b) SLUICE_CONCAT_INNER(a, b)

// Returns from the enclosing function if `expr` (a Status) is not OK.
#define RETURN_IF_ERROR(expr)                        \
  do {                                               \
    ::sluice::Status _st = (expr);                   \
    if (!_st.ok()) return _st;                       \
  } while (0)

// `ASSIGN_OR_RETURN(auto x, f());` declares x from a StatusOr or returns its error.
#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL(SLUICE_CONCAT(_statusor_, __LINE__), lhs, expr)
#define ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                          \
  if (!tmp.ok()) return tmp.status();         \
  lhs = std::move(tmp).value()
