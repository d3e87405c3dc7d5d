// Drives a group's TCP links: moves their queued bytes (progress), checks that their
// peers' hosts still answer, and waits for them with one Poller. The mesh transport
// (mesh/transport.h) makes the links and hands each TCP one over here.
#pragma once

#include <memory>
#include <vector>

#include "transport/tcp/link.h"
#include "transport/tcp/poller.h"

namespace pycollect {
namespace tcp {

class Driver {
 public:
  // Worker thread (the one driving the group) only, unless said otherwise.
  void adopt(std::unique_ptr<Link> link);
  // Moves what moves on every link with queued work; also checks every busy link's
  // liveness (Link::checkAlive) once per check period, and waitReady() wakes up for it.
  void progress();
  bool busy() const;
  // Returns when a link with queued work can move, one of `readable` (descriptors of
  // another transport) can be read, after wake(), or at `until`.
  void waitReady(Clock::time_point until, const std::vector<int>& readable);
  // Any thread.
  void wake() { poller_.wake(); }
  void close();

 private:
  std::vector<std::unique_ptr<Link>> owned_;
  Poller poller_;
  Clock::duration checkPeriod_{};
  Clock::time_point nextCheck_{};
  std::vector<Link*> active_;  // owned_'s, as the poller takes them
};

}  // namespace tcp
}  // namespace pycollect
