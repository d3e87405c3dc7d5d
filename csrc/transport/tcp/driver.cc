#include "transport/tcp/driver.h"

#include <algorithm>

namespace pycollect {
namespace tcp {

void Driver::adopt(std::unique_ptr<Link> link) {
  checkPeriod_ = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(link->checkPeriodSec()));
  active_.push_back(link.get());
  owned_.push_back(std::move(link));
}

void Driver::progress() {
  for (Link* l : active_) {
    if (l->sendPending()) l->progressSend();
    if (l->recvPending()) l->progressRecv();
  }
  auto now = Clock::now();
  if (now < nextCheck_) return;
  nextCheck_ = now + checkPeriod_;
  for (Link* l : active_) {
    if (l->sendPending() || l->recvPending()) l->checkAlive(now);
  }
}

void Driver::waitReady(Clock::time_point until, const std::vector<int>& readable) {
  poller_.wait(active_, readable, busy() ? std::min(until, nextCheck_) : until);
}

bool Driver::busy() const {
  for (Link* l : active_) {
    if (l->sendPending() || l->recvPending()) return true;
  }
  return false;
}

void Driver::close() {
  for (Link* l : active_) l->close();
}

}  // namespace tcp
}  // namespace pycollect
