// Typed errors of the engine. Each maps to a Python exception class in
// bindings/module.cc, so that callers can tell a timeout from a lost peer.
#pragma once

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

// A system call failed; the message carries the call, errno text and peer.
std::string syscallMessage(const char* call, int err, const std::string& what);

}  // namespace pycollect
