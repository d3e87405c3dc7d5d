#include "transport/tcp/transport.h"

#include <algorithm>

#include "common/error.h"
#include "transport/tcp/mesh.h"

namespace pycollect {
namespace tcp {

Endpoint Transport::listen(const std::string& host) {
  listener_ = std::make_unique<Listener>(host);
  return {listener_->address().host(), listener_->address().port()};
}

MeshOptions Transport::meshOptions(uint64_t token) const {
  MeshOptions mo;
  mo.rank = options_.rank;
  mo.size = options_.size;
  mo.token = token;
  mo.timeoutSec = options_.timeoutSec;
  mo.socketBuffer = options_.socketBuffer;
  mo.secret = options_.secret;
  mo.linkTimeoutSec = options_.linkTimeoutSec;
  mo.cancel = &cancel_;
  return mo;
}

std::vector<pycollect::Link*> Transport::connect(const std::vector<Endpoint>& peers,
                                                 uint64_t token) {
  if (!listener_) throw InvalidArgument("call listen() before connect()");
  const MeshOptions mo = meshOptions(token);
  owned_ = connectMesh(*listener_, peers, mo);
  // The mesh is complete: later strangers on the port are refused by the kernel.
  listener_->close();
  std::vector<pycollect::Link*> links;
  for (auto& l : owned_) {
    links.push_back(l.get());
    if (l) active_.push_back(l.get());
  }
  if (!active_.empty()) {
    checkPeriod_ = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(active_[0]->checkPeriodSec()));
  }
  return links;
}

void Transport::progress() {
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

void Transport::waitReady(Clock::time_point until, const std::vector<int>& readable) {
  poller_.wait(active_, readable, busy() ? std::min(until, nextCheck_) : until);
}

std::unique_ptr<Link> Transport::detach(int peer) {
  if (peer < 0 || peer >= static_cast<int>(owned_.size()) || !owned_[peer]) return nullptr;
  active_.erase(std::find(active_.begin(), active_.end(), owned_[peer].get()));
  return std::move(owned_[peer]);
}

bool Transport::busy() const {
  for (Link* l : active_) {
    if (l->sendPending() || l->recvPending()) return true;
  }
  return false;
}

void Transport::close() {
  for (Link* l : active_) l->close();
  if (listener_) listener_->close();
}

}  // namespace tcp
}  // namespace pycollect
