// Typed errors of the engine. Each maps to a Python exception class in
// bindings/module.cc, so that callers can tell a timeout from a lost peer.
#pragma once

#include <exception>
#include <stdexcept>
#include <string>

namespace pycollect {

// Base class: something went wrong in a collective or in setting up a group.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bad arguments detected before anything was sent.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

// A wait ran past its deadline; the message names op, step and peer.
class TimeoutError : public Error {
 public:
  using Error::Error;
};

// A peer closed its connection, reset it, or died.
class PeerLostError : public Error {
 public:
  using Error::Error;
};

// Two ranks issued different collectives (or different shapes) at the same point.
class MismatchError : public Error {
 public:
  using Error::Error;
};

// The group failed earlier; every later call raises this, naming the first failure.
class GroupFailedError : public Error {
 public:
  using Error::Error;
};

// A signal handler of the calling program asked to stop (Ctrl-C) while a call ran on
// its thread; the bindings turn it back into the program's own exception.
class Interrupted : public Error {
 public:
  using Error::Error;
};

// An error kept to be thrown again later, perhaps on other threads: its class and message,
// not the exception object. (One object rethrown on two threads is read by one while the
// other may drop the last reference and destroy it: ThreadSanitizer reports it, rightly, as
// the reference count lives in an uninstrumented library.) Each raise() throws a new one.
class StoredError {
 public:
  StoredError() = default;
  // Classifies `e` (on the thread that caught it).
  static StoredError of(const std::exception_ptr& e) {
    StoredError s;
    try {
      std::rethrow_exception(e);
    } catch (const InvalidArgument& x) {
      s.set(Kind::kInvalidArgument, x.what());
    } catch (const TimeoutError& x) {
      s.set(Kind::kTimeout, x.what());
    } catch (const PeerLostError& x) {
      s.set(Kind::kPeerLost, x.what());
    } catch (const MismatchError& x) {
      s.set(Kind::kMismatch, x.what());
    } catch (const GroupFailedError& x) {
      s.set(Kind::kGroupFailed, x.what());
    } catch (const Interrupted& x) {
      s.set(Kind::kInterrupted, x.what());
    } catch (const std::exception& x) {
      s.set(Kind::kError, x.what());
    } catch (...) {
      s.set(Kind::kError, "unknown error");
    }
    return s;
  }
  explicit operator bool() const { return kind_ != Kind::kNone; }
  [[noreturn]] void raise() const {
    switch (kind_) {
      case Kind::kInvalidArgument: throw InvalidArgument(message_);
      case Kind::kTimeout: throw TimeoutError(message_);
      case Kind::kPeerLost: throw PeerLostError(message_);
      case Kind::kMismatch: throw MismatchError(message_);
      case Kind::kGroupFailed: throw GroupFailedError(message_);
      case Kind::kInterrupted: throw Interrupted(message_);
      default: throw Error(message_);
    }
  }

 private:
  enum class Kind { kNone, kError, kInvalidArgument, kTimeout, kPeerLost, kMismatch, kGroupFailed, kInterrupted };
  void set(Kind k, const char* message) {
    kind_ = k;
    message_ = message;
  }
  Kind kind_ = Kind::kNone;
  std::string message_;
};

// A system call failed; the message carries the call, errno text and peer.
std::string syscallMessage(const char* call, int err, const std::string& what);

}  // namespace pycollect
