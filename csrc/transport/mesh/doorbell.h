// The doorbell of a shared-memory link (shm/link.h) made of the TCP connection its two
// ranks met on: one byte rings, the kernel closes it when the peer dies (so its death
// shows within a poll, never as a silent hang), and shutting it down wakes the peer.
#pragma once

#include <cerrno>
#include <memory>
#include <string>

#include "common/error.h"
#include "transport/shm/link.h"
#include "transport/tcp/link.h"

namespace pycollect {
namespace mesh {

class TcpDoorbell final : public shm::Doorbell {
 public:
  explicit TcpDoorbell(std::unique_ptr<tcp::Link> link) : link_(std::move(link)) {}

  int peer() const override { return link_->peer(); }
  int fd() const override { return link_->fd(); }
  void ring() override {
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
};

}  // namespace mesh
}  // namespace pycollect
