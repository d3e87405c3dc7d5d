// What an algorithm sees of its group: its rank, the links to its peers, a
// deadline, tunables and scratch memory. It never sees a socket: only the Link
// and Transport interfaces of transport/.
//
// Every collective starts with a header exchange: each rank sends a 32-byte
// WireHeader (sequence number, kind, dtype, op, algorithm, count, root) to the
// peers it will talk to and checks theirs. Ranks that disagree raise
// MismatchError naming both calls before any payload is read.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "collectives/hierarchy.h"
#include "collectives/wire_header.h"
#include "common/clock.h"
#include "common/types.h"
#include "trace/flight.h"
#include "trace/hooks.h"
#include "transport/link.h"
#include "transport/transport.h"

namespace pycollect {

struct Tunables {
  size_t segmentBytes = 512 * 1024;  // pipelining unit of the ring algorithms
  int inflight = 4;                  // receive segments posted ahead
  int spinUs = 0;                    // busy-poll this long before sleeping in a wait
};

// A caller's buffer of `count` elements (one of several: gather, scatter, all-to-all,
// coalesced calls).
struct Span {
  char* data = nullptr;
  size_t count = 0;
};

// Work that a context's waits advance besides the links, polled between the waits' looks
// at them: the group's point-to-point messages (comm/p2p.h), which keep moving while a
// collective runs, and the other level of a pipelined hierarchical call (rail_pipeline.h).
class Background {
 public:
  virtual ~Background() = default;
  // Moves on what can move now, never blocking.
  virtual void poll() = 0;
};

// A header being received from one peer.
struct HeaderRecv {
  uint64_t ticket = 0;
  WireHeader header;
};

class SharedArena;

class Context {
 public:
  // `messages`: polled by every wait (the group's point-to-point messages), or nullptr.
  Context(const Context&) = delete;  // a view holds its own links: made, never copied
  Context& operator=(const Context&) = delete;
  // `start`: when the call started (its deadline counts from then).
  Context(int rank, int size, Transport& transport, const std::vector<Link*>& links,
          Background* messages, const WireHeader& call, Clock::time_point deadline, Clock::time_point start,
          const Tunables& tunables, std::vector<char>& scratch);
  // A view of `parent` for an algorithm run among `ranks` (ranks of the parent, this rank
  // among them): rank and size are its place among them, its links theirs; deadline,
  // scratch and flight record the parent's. Its phases are named after `level`
  // ("intra-host reduce-scatter") in timeouts, the flight recorder and traces. It
  // exchanges no headers: the call that made it checked every peer's.
  Context(const Context& parent, const std::vector<int>& ranks, const char* level);

  const int rank;
  const int size;
  const WireHeader call;  // this rank's view of the call (sent in the header)
  const Tunables tunables;

  Link& link(int peer) { return *(*links_)[peer]; }
  // Position x on the ring of this context's ranks, wrapped into [0, size): a ring's
  // chunk and neighbour arithmetic (r - s - 1) steps below zero.
  int wrap(int x) const { return ((x % size) + size) % size; }
  int left() const { return wrap(rank - 1); }
  int right() const { return wrap(rank + 1); }

  // Names the phase and step for timeout messages ("reduce-scatter", 2, 3), and for
  // the trace events that follow (chunk and segment unknown: -1).
  void setStep(const char* phase, int step, int steps) {
    phase = named(phase);
    phase_ = phase;
    step_ = step;
    steps_ = steps;
    if (flight_ != nullptr) flight_->step(phase, step, steps);
    if (trace::Recorder* r = trace::active()) trace::setUnit(*r, trace::Unit{phase, step, -1, -1});
  }
  // The call's flight-recorder entry: steps and waits are written to it.
  void setFlight(const flight::Mark* mark) { flight_ = mark; }
  // The unit the next posts and reductions belong to, for the trace only: pipelined
  // algorithms post ahead of the step they wait in, so they name each unit they post.
  void setUnit(const char* phase, int step, int64_t chunk, int64_t segment) {
    if (trace::Recorder* r = trace::active()) {
      trace::setUnit(*r, trace::Unit{named(phase), step, static_cast<int32_t>(chunk), static_cast<int32_t>(segment)});
    }
  }

  // Header exchange with `peers` (each listed once): send ours, check theirs.
  void exchangeHeaders(const std::vector<int>& peers) {
    postHeaders(peers);
    checkHeaders();
  }
  // The two halves, for algorithms that queue their payload right behind the
  // header (one round trip instead of two): post, queue the payload, then check
  // before the payload is used.
  // `counts` (one per peer, optional) replaces call.count per peer, for calls whose
  // sizes differ by peer (gather, scatter, all-to-all): postHeaders sends
  // sendCounts[i] to peers[i], checkHeaders expects recvCounts[i] from it.
  void postHeaders(const std::vector<int>& peers,
                   const std::vector<uint64_t>* sendCounts = nullptr);
  void checkHeaders(const std::vector<uint64_t>* recvCounts = nullptr);
  // The ring neighbours, without duplicates (one peer at size 2, none at size 1).
  std::vector<int> ringPeers() const;

  void waitRecv(Link& l, uint64_t ticket);
  void waitSend(Link& l, uint64_t ticket);
  // Waits for `done`, naming `what` (e.g. "receive from any of ranks 1, 2") on timeout.
  void waitFor(const std::function<bool()>& done, const std::string& what);
  // The same, `what` told at the timeout (what is being waited for may change meanwhile),
  // and the flight recorder told the rank waited for (`peer`, if one is).
  void waitFor(const std::function<bool()>& done, const std::function<std::string()>& what,
               int peer = flight::kAnyPeer);
  // A receive from each of `peers` straight into its span (`spans` indexed by rank, of
  // `elemBytes`-byte elements), and the wait for all of them, naming `phase` on timeout.
  std::vector<uint64_t> postRecvs(const std::vector<int>& peers, const std::vector<Span>& spans,
                                  size_t elemBytes);
  void waitRecvs(const std::vector<int>& peers, const std::vector<uint64_t>& tickets, const char* phase);
  // Waits until every posted send has left this process (the caller's buffers are
  // then free). Every algorithm ends with it.
  void drainSends();

  // Scratch memory owned by the communicator, reused across calls.
  char* scratch(size_t bytes);

  // The group's hosts (the hierarchical algorithms), and a second buffer they keep their
  // partial results in while the phases they run use scratch(): both the communicator's.
  void setHierarchy(const Hierarchy* h, std::vector<char>* stage) {
    hierarchy_ = h;
    stage_ = stage;
  }
  const Hierarchy& hierarchy() const;
  char* stage(size_t bytes);
  // From now on every wait of this context also polls `b` (nullptr: none).
  void setBackground(Background* b) { background_ = b; }

  // The group's shared arena (shared_arena.h), nullptr where the group has none. A view
  // (a level of the hierarchy) has none.
  void setArena(SharedArena* a) { arena_ = a; }
  SharedArena* arena() const { return level_ == nullptr ? arena_ : nullptr; }
  // For waits that are not on a link (the shared arena's flags): the transport that moves
  // the links meanwhile, one look at the point-to-point messages and the background, the
  // deadline, and how a timeout's message starts.
  Transport& transport() { return transport_; }
  void pollBackground() {
    if (messages_ != nullptr) messages_->poll();
    if (background_ != nullptr) background_->poll();
  }
  Clock::time_point deadline() const { return deadline_; }
  // "<op> (call #N) on rank R timed out after S s": how every timeout message starts.
  std::string timedOut() const;
  // " in <phase> step i/n": where the call is, for messages.
  std::string stepText() const;

 private:
  // Throws MismatchError if the i-th header of the exchange disagrees with this call.
  void checkHeader(size_t i, const std::vector<uint64_t>* recvCounts);
  // `phase` as this view names it: "<level> <phase>" (interned: trace units keep it).
  const char* named(const char* phase);
  std::string describeWait(const Link& l, const char* what) const;
  void wait(Link& l, const std::function<bool()>& done, const char* what);
  // Drives the links (and polls the background) until `done`, or raises at the deadline.
  void until(const std::function<bool()>& done, const std::function<std::string()>& describe,
             std::chrono::microseconds spin);

  std::vector<int> headerPeers_;
  std::vector<WireHeader> ours_;     // per peer: call, with that peer's count
  std::vector<HeaderRecv> theirs_;
  Transport& transport_;      // drives every link while we wait
  Background* messages_;      // the group's point-to-point messages, polled while we wait
  // Indexed by rank, nullptr at self: the group's own (no copy per call), or a view's.
  const std::vector<Link*>* links_;
  std::vector<Link*> viewLinks_;  // a view's links (links_ points here)
  Clock::time_point deadline_;
  Clock::time_point start_;
  std::vector<char>& scratch_;
  const flight::Mark* flight_ = nullptr;
  const char* phase_ = "start";
  int step_ = 0, steps_ = 0;
  int groupRank_;  // this rank in the parent group (its rank, but for a view), for messages
  const char* level_ = nullptr;    // a view's level ("intra-host"), nullptr for the call
  const char* lastPhase_ = nullptr, *lastNamed_ = nullptr;  // named()'s one-entry cache
  const Hierarchy* hierarchy_ = nullptr;
  std::vector<char>* stage_ = nullptr;
  Background* background_ = nullptr;
  SharedArena* arena_ = nullptr;
};

// Splits `count` elements into `parts` chunks whose sizes differ by at most one.
struct Chunks {
  Chunks(size_t count, int parts) : base(count / parts), rem(count % parts) {}
  size_t offset(int i) const { return i * base + (static_cast<size_t>(i) < rem ? i : rem); }
  size_t length(int i) const { return base + (static_cast<size_t>(i) < rem ? 1 : 0); }
  size_t base, rem;
};

// A chunk cut into pipelining segments of at most `segElems` elements.
struct Segments {
  Segments(size_t maxChunk, size_t segElems)
      : per(segElems == 0 ? 1 : segElems), count(maxChunk == 0 ? 0 : (maxChunk + per - 1) / per) {}
  // [begin, end) of segment j within a chunk of `length` elements (may be empty).
  size_t begin(size_t j, size_t length) const { return std::min(length, j * per); }
  size_t end(size_t j, size_t length) const { return std::min(length, (j + 1) * per); }
  // end - begin: the elements of segment j (0 past the chunk's end).
  size_t size(size_t j, size_t length) const { return end(j, length) - begin(j, length); }
  size_t per;
  size_t count;
};

// The pipelining segments of a chunk of at most `maxChunk` elements of `elementSize`
// bytes: tunables.segmentBytes each (at least one element).
inline Segments pipelineSegments(const Context& ctx, size_t maxChunk, size_t elementSize) {
  return Segments(maxChunk, std::max<size_t>(1, ctx.tunables.segmentBytes / elementSize));
}

}  // namespace pycollect
