// Point-to-point messages, matched by source and tag as MPI and Gloo match them.
//
// Each pair of ranks carries its messages on a link of its own (Channel::kPointToPoint,
// transport.h), apart from the collectives' link: a send never waits behind a collective's
// bytes, nor a collective behind a message, so a program may post a receive before a
// barrier and its send after an all-reduce, with its tags in any order.
//
// On that link every message starts with a 64-byte Frame (p2p_frame.h). A rank reads a
// peer's frames while it has something to learn from them: a posted receive that a message
// of that peer may match, or a send of its own that waits for the peer's answer. Each
// message is matched when its frame arrives: to the oldest posted receive that names its
// source (or any source) and its tag. A message that matches none waits, in arrival order,
// among the unexpected ones, which every new receive searches first (the oldest that fits).
// So messages from one sender with one tag are received in the order sent, whatever else
// arrives between them, and a receive buffer may be larger than its message (the RecvWork
// says how many bytes came); a smaller one is an error (MismatchError), as it is in MPI.
// Only bytes are matched: a message received into another dtype is copied as it is, as
// Gloo does.
//
// Small messages go eagerly, frame and payload together (up to kInlineBytes inside the
// frame itself), so that a reply needs no round trip; one that arrives before its receive
// is copied into the unexpected queue, then into the receive when it comes. That queue is
// bounded: a sender holds a credit of eager bytes per peer, spends it on each eager send,
// and gets it back from the receiver (in a Credit frame, or inside a Go) once the message
// is matched. A large message, or one sent without credit, goes by rendezvous: a Ready
// frame only; the receiver answers Go once a receive matched it, and the payload moves
// then, straight from the sender's buffer into the receiver's, never copied twice.
//
// Worked example, 2 ranks. Rank 1 sends tag 6 (8 bytes), then tag 5 (1 MiB); rank 0
// receives tag 5, then tag 6:
//
//   rank 1  -> Eager{id 0, tag 6, 8 B inline}, Ready{id 1, tag 5, 1 MiB}
//   rank 0     recv(tag 5): nothing unexpected; posted, so it reads rank 1's frames:
//              Eager tag 6 matches no posted receive: unexpected, its 8 bytes kept;
//              Ready tag 5 matches recv(tag 5)  -> Go{id 1}
//   rank 1     Go{id 1}                         -> Data{id 1} + 1 MiB from its buffer
//   rank 0     Data{id 1}: the 1 MiB lands in recv(tag 5)'s buffer; it completes.
//              recv(tag 6): the unexpected Eager matches; its 8 bytes are copied, it
//              completes at once, and its credit goes back to rank 1 in time.
//
// Threads: one PointToPoint per group, driven by whichever thread drives the group's links
// (worker.cc, [Note: the driving rule]); calls from other threads reach it through the
// communicator. It is polled between collectives and inside their waits, so messages keep
// moving while a collective runs; a Work it completes inside a collective keeps its hooks
// until the collective ended (deferHooks).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "collectives/wire_header.h"
#include "comm/p2p_frame.h"
#include "comm/work.h"
#include "common/clock.h"
#include "transport/link.h"

namespace pycollect {

constexpr int kAnySource = -1;  // a receive's peer: whichever rank's message matches first

// One send or receive as its caller issued it.
struct P2POp {
  bool send = true;
  int peer = kAnySource;  // a rank of the group; a receive's kAnySource: any
  int tag = 0;
  char* data = nullptr;
  size_t bytes = 0;           // a send: the message; a receive: its buffer's room
  WireHeader call;            // what the caller asked for (kind kSend), for messages and the flight record
  std::shared_ptr<Work> work;  // a receive's is a RecvWork
  int32_t* sourceOut = nullptr;  // a receive: the sender's rank is also written here, if set
  Clock::time_point posted;
  Clock::time_point deadline;
  // The message's number: a send's, given when issued (per pair, in the order posted); a
  // receive's, its message's once matched. Then, set as it goes, the sender and the
  // message's size (a receive), and a send's frame (until it is sent).
  uint64_t id = 0;
  int from = -1;
  size_t got = 0;
  Frame frame;
  size_t slot = 0;  // where the engine keeps it among the ops in flight (PointToPoint::ops_)
};

struct P2POptions {
  size_t eagerBytes = 64 << 10;   // larger messages go by rendezvous
  size_t creditBytes = 256 << 10;  // eager bytes (frames included) in flight to one peer, unmatched
};

class PointToPoint {
 public:
  PointToPoint(int rank, int size, P2POptions options);

  // The point-to-point links, indexed by rank, nullptr at this rank (before the first post).
  void setLinks(std::vector<Link*> links);
  // Posts a send or receive; posts are matched in the order made. Throws MismatchError (a
  // receive too small for the unexpected message it matched) after failing the op's Work.
  void post(std::unique_ptr<P2POp> op);
  // After the transport moved bytes: reads what arrived, answers and sends what is due, and
  // finishes the Works of what completed (after everything else, so that their hooks may
  // post more). Past `now`'s deadlines raise TimeoutError if `checkDeadlines`. Throws after
  // failing the Work of the op at fault. Returns whether it posted receives on a link that
  // another pass of the transport may fill at once.
  bool poll(Clock::time_point now, bool checkDeadlines);
  // Whether anything is posted or awaited (the links have work for it).
  bool busy() const { return !ops_.empty(); }
  // The nearest deadline of an op in flight (time_point::max() if none).
  Clock::time_point nextDeadline() const;
  // Fails every op in flight with GroupFailedError naming `reason` and forgets them (the
  // group failed: its links were aborted).
  void failAll(const std::string& reason);
  // While on, Works completed here keep their hooks (Work::finishDeferred) until the
  // caller takes them (takeDeferred) and runs them where calls may be issued.
  void deferHooks(bool on) { deferHooks_ = on; }
  bool deferringHooks() const { return deferHooks_; }
  std::vector<std::shared_ptr<Work>> takeDeferred();

  size_t eagerBytes() const { return options_.eagerBytes; }

 private:
  // A message that arrived before a receive matched it: its Eager payload, or the Ready.
  struct Unexpected {
    int from;
    int tag;
    uint64_t id;
    size_t bytes;
    bool eager;
    bool arrived;               // eager: all its payload is here
    std::vector<char> data;     // eager: the payload
    P2POp* claimedBy = nullptr;  // a receive matched it before its payload arrived
  };
  using UnexpectedIt = std::list<Unexpected>::iterator;
  // A payload on its way in, in the order posted on the peer's link (tickets complete so).
  struct Landing {
    uint64_t ticket;
    P2POp* recv;          // into a receive's buffer, or
    UnexpectedIt unexpected;  // into the unexpected queue
  };
  struct Sent {
    uint64_t ticket;  // its last bytes
    P2POp* op;        // a message, or nullptr: an answer (frame in answers, popped in order)
  };
  struct Peer {
    Link* link = nullptr;
    bool reading = false;  // a frame receive is posted into `frame`
    Frame frame;
    uint64_t frameTicket = 0;
    std::deque<Landing> landing;
    std::deque<Sent> sending;
    std::deque<Frame> answers;  // Go and Credit frames until sent (stable: deque ends only)
    std::unordered_map<uint64_t, P2POp*> awaitingGo;    // sends announced by Ready
    std::unordered_map<uint64_t, P2POp*> awaitingData;  // receives that answered Go
    size_t credit = 0;    // eager bytes this rank may still send the peer
    size_t owed = 0;      // eager bytes received from the peer and matched, not given back
    int postedFrom = 0;   // posted receives naming the peer
    bool listed = false;  // in active_
  };

  // The receive among posted_ that a message from `from` with `tag` matches, or end().
  std::vector<P2POp*>::iterator findPosted(int from, int tag);
  // The oldest unexpected message that receive `op` matches, or end().
  UnexpectedIt findUnexpected(const P2POp& op);
  void unpost(std::vector<P2POp*>::iterator it);
  // `r` matched message `id` of `bytes` from `from`: its sizes checked, its fields set.
  void matched(P2POp& r, int from, uint64_t id, size_t bytes);
  void takeUnexpected(P2POp& r, UnexpectedIt u);
  void handle(int from);  // peers_[from].frame arrived
  void sendMessage(P2POp& s);
  void answer(int to, FrameKind kind, uint64_t id);  // Go or Credit, with the credit owed
  void owe(int to, size_t bytes);
  void readFrom(int peer);  // posts a frame receive if the peer has something to say to us
  void unread(int peer);    // takes the frame receive back if it no longer has
  bool interested(int peer) const;
  void activate(int peer);  // something of the peer's is in flight: poll() looks at it
  void land(const Landing& l);  // a payload is all here
  void done(P2POp* op, std::exception_ptr error = nullptr);  // completes op (at the end of poll)
  // Fails `op` with `error` and throws it (a mismatch or a timeout that fails the group).
  [[noreturn]] void failOp(P2POp* op, std::exception_ptr error);
  void checkDeadlines(Clock::time_point now);
  std::string others() const;  // "rank 0 or rank 2": the ranks a receive from any source waits on
  void finishCompleted();  // the Works of what completed, hooks run or deferred
  static size_t charge(size_t bytes) { return sizeof(Frame) + bytes; }  // of an eager message's credit

  const int rank_;
  const int size_;
  const P2POptions options_;
  std::vector<Peer> peers_;
  std::vector<int> active_;  // the peers poll() looks at: something of theirs is in flight
  // Vectors, not lists or maps: after the first few calls a message allocates nothing here.
  std::vector<std::unique_ptr<P2POp>> ops_;  // everything in flight, in no order (P2POp::slot)
  std::vector<P2POp*> posted_;         // receives not yet matched, oldest first
  int postedAny_ = 0;                  // ... of which from any source
  std::list<Unexpected> unexpected_;   // in arrival order
  using Completed = std::vector<std::pair<std::unique_ptr<P2POp>, std::exception_ptr>>;
  Completed completed_, finishing_;    // to finish at the end of a poll; its spare (capacity kept)
  Clock::time_point nextDeadline_ = Clock::time_point::max();
  bool deferHooks_ = false;
  std::vector<std::shared_ptr<Work>> deferred_;
};

}  // namespace pycollect
