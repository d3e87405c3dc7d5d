// The doorbell of a shared-memory link (shm/link.h): the peer's Bell (shm/bell.h), borrowed
// at the upgrade, wakes it; the TCP connection the two ranks met on says when the peer is
// gone (the kernel closes it when the peer dies, so its death shows within a poll, never as
// a silent hang) and, shut down, wakes the peer. Where the Bell could not be borrowed a
// byte on that connection rings instead.
#pragma once

#include <cerrno>
#include <memory>
#include <string>

#include "common/error.h"
#include "transport/shm/bell.h"
#include "transport/shm/link.h"
#include "transport/tcp/link.h"

namespace pycollect {
namespace mesh {

class TcpDoorbell final : public shm::Doorbell {
 public:
  TcpDoorbell(std::unique_ptr<tcp::Link> link, shm::Bell peerBell)
      : link_(std::move(link)), peerBell_(std::move(peerBell)) {}

  int peer() const override { return link_->peer(); }
  int fd() const override { return link_->fd(); }
  void ring() override {
    if (peerBell_.valid()) {
      peerBell_.ring();
      return;
    }
    char one = 1;
    link_->socket().sendSome(&one, 1);  // EAGAIN: unread bytes will wake the peer anyway
  }
  std::string drain() override {
    char buf[64];
    for (;;) {
      tcp::IoResult r = link_->socket().recvSome(buf, sizeof(buf));
      if (r.err == EAGAIN) return "";
      if (r.eof) return closedByPeer(peer());
      if (r.err != 0) {
        return "connection to rank " + std::to_string(peer()) + " lost: " +
               syscallMessage("recv", r.err, "on the shared-memory doorbell");
      }
    }
  }
  void abort() override { link_->abort(); }
  void interrupt() override { link_->interrupt(); }
  void close() override { link_->close(); }

 private:
  std::unique_ptr<tcp::Link> link_;
  shm::Bell peerBell_;
};

}  // namespace mesh
}  // namespace pycollect
