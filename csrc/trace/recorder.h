// A communicator's trace: a bounded buffer of events, filled by the thread that
// runs traced collectives and emptied by Python (take()).
//
// Sends and receives complete in order on each link direction (link.h), so a
// completion is matched to its post by ticket: the recorder keeps, per peer and
// direction, the posts not yet completed, and turns each into a "done" event with
// the post's unit and bytes once the transport's counter passes its ticket.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

#include "trace/event.h"
#include "trace/hooks.h"

namespace pycollect {
namespace trace {

class Recorder {
 public:
  static constexpr size_t kDefaultCapacity = size_t{1} << 18;  // events kept until take()

  Recorder(int worldSize, size_t capacity = kDefaultCapacity);

  // Makes `recorder` (nullptr: none) active on this thread for one call.
  class Scope {
   public:
    Scope(Recorder* recorder, uint8_t kind, uint64_t seq);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Recorder* saved_;
  };

  // Any thread: the events recorded so far (oldest first), and how many were dropped
  // because the buffer was full; both are reset.
  std::vector<Event> take(uint64_t* dropped);
  size_t capacity() const { return capacity_; }

 private:
  friend void posted(Recorder&, Direction, int, uint64_t, size_t);
  friend void completed(Recorder&, Direction, int, uint64_t);
  friend void setUnit(Recorder&, const Unit&);
  friend void reduceEvent(Recorder&, EventType, size_t);

  struct Pending {
    uint64_t ticket;
    Event posted;
  };
  Event make(EventType t, int peer, uint64_t bytes) const;
  void push(const Event& e);

  const size_t capacity_;
  // Driving thread only (one at a time: the communicator hands the links over).
  std::vector<std::deque<Pending>> pending_[2];  // [direction][peer]
  uint8_t kind_ = 0;
  uint64_t seq_ = 0;
  Unit unit_;

  std::mutex mu_;  // events_ and dropped_: written by the driving thread, taken by Python
  std::vector<Event> events_;
  uint64_t dropped_ = 0;
};

}  // namespace trace
}  // namespace pycollect
