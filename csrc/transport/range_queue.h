// One direction of a link: the byte ranges posted to it, oldest first, each with its
// ticket (its post number). A ticket is done once its range and every one before it
// are retired, so tickets complete in order, as Link promises. Both transports keep
// one queue per direction (tcp/link.h, shm/link.h): how the bytes move is theirs, the
// bookkeeping of which bytes go next and which tickets are done is here.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <deque>

namespace pycollect {

// A posted range: where its next byte goes to (or comes from) and how many are left.
struct PostedRange {
  char* data;
  size_t left;
};

// R: PostedRange, or a transport's PostedRange with more fields (shm's sends).
template <class R = PostedRange>
class RangeQueue {
 public:
  uint64_t post(const R& r) {
    q_.push_back(r);
    return posted_++;
  }
  bool done(uint64_t ticket) const { return done_ > ticket; }
  uint64_t doneCount() const { return done_; }
  bool empty() const { return q_.empty(); }
  size_t size() const { return q_.size(); }
  R& front() { return q_.front(); }
  const R& front() const { return q_.front(); }
  R& operator[](size_t i) { return q_[i]; }

  // iovecs for the ranges' bytes still to move, oldest first: at most `max` of them and
  // `limit` bytes in all. Returns how many it filled (0: only empty ranges are queued).
  int gather(struct iovec* iov, int max, size_t limit = SIZE_MAX) const {
    int n = 0;
    size_t total = 0;
    for (auto it = q_.begin(); it != q_.end() && n < max && total < limit; ++it) {
      if (it->left == 0) continue;
      size_t take = it->left < limit - total ? it->left : limit - total;
      iov[n++] = {it->data, take};
      total += take;
    }
    return n;
  }

  // `bytes` more have moved, into or out of the front ranges in order: advances them
  // and retires each one finished, empty ones included. Returns how many it retired.
  uint64_t advance(size_t bytes) {
    uint64_t retired = 0;
    while (!q_.empty()) {
      R& r = q_.front();
      size_t take = bytes < r.left ? bytes : r.left;
      r.data += take;
      r.left -= take;
      bytes -= take;
      if (r.left != 0) break;
      q_.pop_front();
      ++retired;
    }
    done_ += retired;
    return retired;
  }

  // Takes back the range posted last, `ticket` of `bytes` bytes, if none of its bytes moved
  // yet: true, and its ticket is given to the next post.
  bool unpost(uint64_t ticket, size_t bytes) {
    if (q_.empty() || ticket + 1 != posted_ || q_.back().left != bytes) return false;
    q_.pop_back();
    --posted_;
    return true;
  }

  // Retires the front range whatever is left of it (shm: a single-copy send whose bytes
  // the peer has read).
  void retireFront() {
    q_.pop_front();
    ++done_;
  }

  // After a failure: nothing is left and every ticket counts as done.
  void abandon() {
    q_.clear();
    done_ = posted_;
  }

 private:
  std::deque<R> q_;
  uint64_t posted_ = 0, done_ = 0;
};

}  // namespace pycollect
