// The listener's log of refused connections, rate-limited so that a flood of
// strangers costs a few lines, not one each: the first refusal of a window is
// printed in full (who, why); the rest are counted by kind and summed up when the
// window ends or the group closes:
//   pycollect: rank 1 refused 40 connections on port 41234 in the last 0.8 s: 38 silent, 2 bad magic
#pragma once

#include <array>
#include <string>

#include "common/clock.h"
#include "transport/tcp/address.h"
#include "transport/tcp/handshake.h"

namespace pycollect {
namespace tcp {

class RefusalLog {
 public:
  RefusalLog(int rank, int port) : rank_(rank), port_(port) {}
  ~RefusalLog() { flush(Clock::now()); }

  void add(const Address& from, const Verdict& verdict, Clock::time_point now);
  // Prints the window's summary if it is over (or `force`) and anything was counted.
  void flush(Clock::time_point now, bool force = true);

 private:
  static constexpr int kKinds = static_cast<int>(Refusal::kAuthFailed) + 1;
  static constexpr std::chrono::seconds kWindow{10};

  int rank_, port_;
  Clock::time_point windowStart_{};
  int total_ = 0;
  std::array<int, kKinds> counts_{};
};

}  // namespace tcp
}  // namespace pycollect
