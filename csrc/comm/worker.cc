// The communicator's queue and worker (communicator.h): how a call runs, and how a group
// fails or ends.
//
// A call is an Op, numbered at enqueue (collectives in one sequence per group, sends per
// pair and direction). A blocking caller with nothing queued ahead of it runs its call
// inline, on its own thread (driving_: the worker stands aside meanwhile), which saves
// two thread hand-offs per small call; otherwise the op is queued and the worker runs the
// queue in order. An asynchronous send or recv with nothing ahead of it is posted by its
// caller, who also makes one pass over the links (postInline): a small send is gone
// before the call returns. A posted send or recv that is not done moves on to p2p_,
// which the worker progresses while idle (progressIdle) until it completes (reapP2P).
//
// Failure. A call that fails fails the group (failRunning -> failWith): its message is
// kept, every link is aborted so the neighbours fail within milliseconds, and every
// queued or posted call is finished with an error naming the cause (failPending, also
// shutdown's, with "the process group was destroyed"). abort() does the same from any
// thread: it records the reason and interrupts the links, so the running call fails on
// the worker, which then fails the rest.
//
// [Note: the driving rule] Several threads may run the engine: the worker, a caller that
// runs its blocking call inline (enqueue), a caller that posts its send or recv (enqueue ->
// postInline), and a waiter that runs its queued call or drives the links while it waits
// (waitDriving: runTaken, then the drive loop). At most one of them drives at a time: the
// thread that set driving_ (under mu_) when it was false. The driving thread, and no
// other, may touch
//   - the links and the transport's progress (progress, waitReady; wake() and a link's
//     interrupt() are the exceptions: any thread),
//   - p2p_ (post, reap, and failPending's drain),
//   - scratch_, stage_, inbox_ and recvSeq_ (the algorithms' memory and numbering),
// until it clears driving_ (under mu_). So a failure found while driving is handed on
// (failWith, failPending) before driving_ is cleared, never after. Everything else that
// threads share is read or written under mu_: queue_, failure_, stopping_, drivers_ and
// driving_ itself; a thread that does not drive reads p2p_ and the scratch only while
// driving_ is false (othersNeedWaking). shutdown() takes driving_ for good once the worker
// has joined and the last driver has let go, then drains what is left.
//
// [Note: calls from a completion] A Work's completion hooks (Work::whenDone: the torch
// backend completes torch's Futures there, whose callbacks may issue more calls, as DDP's
// PowerSGD hook does, and wait for them) run on the thread that finished the op, which
// still drives the group (DriverMark says so). A call issued there cannot be left to the
// worker, which may be this very thread: enqueue runs it on the spot (runHere), after
// whatever was queued before it (run as the worker runs it), and drives its own send or
// recv to its end. Works are finished outside any iteration over p2p_ (reapP2P), so such
// a call may post transfers.
#include <unistd.h>

#include <algorithm>
#include <deque>

#include "comm/communicator.h"
#include "common/error.h"
#include "transport/wait.h"

namespace pycollect {
namespace {

thread_local bool tInline = false;  // this thread's blocking call may run inline (InlineScope)
thread_local const Communicator* tDriver = nullptr;  // the group this thread drives now, if any

// Marks this thread as the driving thread of `c` while it runs ops (and so their completion
// hooks): see [Note: calls from a completion].
struct DriverMark {
  explicit DriverMark(const Communicator* c) : saved(tDriver) { tDriver = c; }
  ~DriverMark() { tDriver = saved; }
  const Communicator* saved;
};

}  // namespace

InlineScope::InlineScope(bool on) : saved_(tInline) { tInline = on; }
InlineScope::~InlineScope() { tInline = saved_; }

WireHeader& Communicator::headerOf(Op& op) {
  if (auto* p2p = std::get_if<std::unique_ptr<PendingP2P>>(&op)) return (*p2p)->header;
  return std::get<Collective>(op).header;
}

std::shared_ptr<Work>& Communicator::workOf(Op& op) {
  if (auto* p2p = std::get_if<std::unique_ptr<PendingP2P>>(&op)) return (*p2p)->work;
  return std::get<Collective>(op).work;
}

flight::Call Communicator::flightCall(Op& op) {
  const WireHeader& h = headerOf(op);
  flight::Call c;
  c.seq = h.seq;
  c.kind = h.kind;
  c.dtype = h.dtype;
  c.algo = h.algo;
  c.root = h.root;
  c.count = h.count;
  if (auto* p2p = std::get_if<std::unique_ptr<PendingP2P>>(&op)) {
    c.peer = (*p2p)->peer;
    c.send = (*p2p)->isSend;
  } else if (h.kind == static_cast<uint8_t>(OpKind::kSend)) {
    c.peer = flight::kAnyPeer;  // a recv from any source
  }
  return c;
}

std::shared_ptr<Work> Communicator::enqueue(Op op) {
  checkNotForked();
  std::unique_lock<std::mutex> lock(mu_);
  if (!failure_.empty()) {
    throw GroupFailedError("process group failed earlier; no further calls are possible: " + failure_);
  }
  if (stopping_) throw GroupFailedError("process group was destroyed");
  if (!connected_) throw InvalidArgument("communicator is not connected");
  WireHeader& header = headerOf(op);
  auto* p2p = std::get_if<std::unique_ptr<PendingP2P>>(&op);
  if (p2p != nullptr) {
    // p2p messages are numbered per pair and direction; a recv when it is posted (a
    // recv from any source before it may take a message from the same peer).
    if ((*p2p)->isSend) header.seq = sendSeq_[(*p2p)->peer]++;
  } else if (header.kind != static_cast<uint8_t>(OpKind::kSend)) {
    header.seq = seq_++;  // a recv from any source is this rank's own: not numbered
  }
  std::string what = "rank " + std::to_string(rank_) + " " + describeCall(header);
  auto* collective = std::get_if<Collective>(&op);
  auto work = collective != nullptr && collective->makeWork ? collective->makeWork(std::move(what))
                                                            : std::make_shared<Work>(std::move(what));
  workOf(op) = work;
  work->setFlight(flight_.issued(flightCall(op)));
  ++calls_[opKindName(static_cast<OpKind>(header.kind))];  // send and recv both count as "send/recv"
  if (collective != nullptr) collective->trace = tracing_.load(std::memory_order_relaxed);
  if (tDriver == this) {  // issued by a completion hook on the driving thread
    std::deque<Op> ahead;
    ahead.swap(queue_);
    ahead.push_back(std::move(op));
    lock.unlock();
    runHere(ahead);
    return work;
  }
  if (tInline && queue_.empty() && !driving_ && p2p_.empty()) {
    driving_ = true;  // the worker waits for us; nobody else touches the links meanwhile
    lock.unlock();
    if (collective != nullptr) {
      runCollective(*collective);
    } else {
      runP2P(**p2p);
    }
    lock.lock();
    driving_ = false;
    const bool wake = othersNeedWaking();
    lock.unlock();  // notify unlocked: a thread woken under the lock would only block on it
    if (wake) cv_.notify_all();
    return work;
  }
  if (p2p != nullptr && queue_.empty() && !driving_) {
    // An asynchronous send or recv with nothing ahead of it: post it here, so a small
    // send's bytes leave now and a recv takes what already came, without waking the
    // worker first; the worker carries on with what is left (postInline).
    driving_ = true;
    lock.unlock();
    bool done = postInline(**p2p);
    lock.lock();
    driving_ = false;
    if (!done) p2p_.push_back(std::move(*p2p));
    // The worker progresses what is left (it may have gone to sleep while we drove) or
    // runs what queued meanwhile.
    const bool wake = othersNeedWaking();
    lock.unlock();
    if (wake) cv_.notify_all();
    return work;
  }
  queue_.push_back(std::move(op));
  if (drivers_ > 0) {
    cv_.notify_all();  // callers wait on cv_ too (waitDriving): the worker must hear it
  } else {
    cv_.notify_one();
  }
  if (idlePolling_) transport_->wake();
  return work;
}

bool Communicator::waitDriving(const std::shared_ptr<Work>& work, double timeoutSec) {
  checkNotForked();
  const bool limited = timeoutSec >= 0;
  const auto deadline = limited ? deadlineFromNow(timeoutSec) : Clock::time_point::max();
  if (!work->isCompleted()) {
    std::unique_lock<std::mutex> lock(mu_);
    if (tInline && !driving_ && !stopping_ && failure_.empty() && !queue_.empty() && workOf(queue_.front()) == work) {
      Op op = std::move(queue_.front());
      queue_.pop_front();
      driving_ = true;
      lock.unlock();
      runTaken(op);
      lock.lock();
      driving_ = false;
    }
    auto others = [this] { return !queue_.empty() || stopping_ || !failure_.empty(); };
    if (!work->isCompleted() && !others()) {
      ++drivers_;
      if (idlePolling_) transport_->wake();  // the worker stands aside (workerLoop)
      auto ready = [&] { return !driving_ || work->isCompleted() || others(); };
      if (limited) {
        cv_.wait_until(lock, deadline, ready);
      } else {
        cv_.wait(lock, ready);
      }
      const bool drive = !driving_ && !work->isCompleted() && !others() && !p2p_.empty();
      if (drive) idlePolling_ = driving_ = true;  // enqueue wakes us for what it queues
      while (drive) {
        lock.unlock();
        std::string error;
        try {
          // Busy-poll first, as an inline call does (PYCOLLECT_SPIN_US): a peer that
          // answers within microseconds is seen within microseconds; then sleep.
          const auto spinEnd = Clock::now() + std::chrono::microseconds(options_.tunables.spinUs);
          do {
            progressP2P();
          } while (!work->isCompleted() && Clock::now() < spinEnd);
          // Sleep no further than this wait's own deadline (one of Work.wait's short waits:
          // Python's timeout and its signal handlers are seen after each).
          if (!work->isCompleted()) progressIdle(deadline);
        } catch (const std::exception& e) {
          error = e.what();
        }
        if (!error.empty()) failWith(error);  // still driving: failPending drains p2p_
        lock.lock();
        if (drivers_ > 1) cv_.notify_all();  // another waiter's call may have completed
        if (work->isCompleted() || others() || p2p_.empty() || Clock::now() >= deadline) break;
      }
      if (drive) idlePolling_ = driving_ = false;
      --drivers_;
    }
    // The worker takes over what is left or queued meanwhile; other waiters may drive now.
    const bool wake = othersNeedWaking();
    lock.unlock();
    if (wake) cv_.notify_all();
  }
  if (!limited) return work->wait(-1);
  double left = std::chrono::duration<double>(deadline - Clock::now()).count();
  return work->wait(left > 0 ? left : 0);
}

void Communicator::runHere(std::deque<Op>& ops) {
  // What was queued ahead runs as the worker would run it (runTaken: a send or recv posted,
  // p2p_ carries it on); the hook's own call, last, to its end: the hook waits for it, and
  // no other thread drives while this one does.
  while (!ops.empty()) {
    std::string failure;
    {
      std::lock_guard<std::mutex> lock(mu_);
      failure = failure_;
    }
    if (!failure.empty()) {  // as failWith would have dropped them from the queue
      failPending(std::move(ops), "the process group failed: " + failure);
      return;
    }
    Op op = std::move(ops.front());
    ops.pop_front();
    if (!ops.empty()) {
      runTaken(op);
    } else if (auto* c = std::get_if<Collective>(&op)) {
      runCollective(*c);
    } else {
      runP2P(*std::get<std::unique_ptr<PendingP2P>>(op));
    }
  }
}

bool Communicator::postInline(PendingP2P& p) {
  DriverMark mark(this);
  try {
    postP2P(p);
    // The pass may complete transfers posted before (p2p_): they are reaped here too,
    // else their waiters would wait for a wake-up that never comes (nothing is left
    // to move on the links, so the worker's wait does not end).
    progressP2P();
    if (!p.poll()) return false;
    countBytesSent();
    p.work->finish(nullptr);
  } catch (const std::exception& e) {
    failRunning(p.work, e);
  }
  return true;
}

void Communicator::runCollective(Collective& c) {
  DriverMark mark(this);
  trace::Recorder::Scope traced(c.trace ? &recorder_ : nullptr, c.header.kind, c.header.seq);
  try {
    c.work->flight().started();
    Context ctx(rank_, size_, *transport_, links_, inbox_, c.header, deadlineFromNow(c.timeoutSec),
                options_.tunables, scratch_);
    ctx.setFlight(&c.work->flight());
    ctx.setHierarchy(&hierarchy_, &stage_);
    c.run(ctx);
    ctx.drainSends();  // header sends of early-returning algorithms
    scratchBytes_.store(heldScratch());
    countBytesSent();
    c.work->finish(nullptr);
  } catch (const std::exception& e) {
    failRunning(c.work, e);
  }
}

void Communicator::postP2P(PendingP2P& p) {
  if (!p.isSend) {
    p.header.seq = recvSeq_[p.peer]++;
    p.work->flight().numbered(p.header.seq);
  }
  p.work->flight().started();
  p.post(links_[p.peer], inbox_, deadlineFromNow());
}

void Communicator::runP2P(PendingP2P& p) {
  DriverMark mark(this);
  try {
    postP2P(p);
    // The transfer's own deadline (poll() names the call) comes first; the wait's is a backstop.
    try {
      waitUntil(*transport_, [&p] { return p.poll(); }, p.deadline + std::chrono::seconds(1),
                [&p] { return p.work->what(); }, std::chrono::microseconds(options_.tunables.spinUs));
    } catch (const PeerLostError&) {
      p.poll();  // as in progressIdle: a mismatch in a header that arrived wins over a peer that left
      throw;
    }
    countBytesSent();
    p.work->finish(nullptr);
  } catch (const std::exception& e) {
    failRunning(p.work, e);
  }
}

void Communicator::failRunning(const std::shared_ptr<Work>& work, const std::exception& e) {
  bool stopping;
  std::string earlier;  // abort() failed the group first: what broke this op is its doing
  std::string reason;   // what the group failed of
  bool own = !work->isCompleted();  // a p2p failure found by reapP2P finished its own work
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping = stopping_;
    earlier = failure_;
    reason = stopping ? "process group was destroyed"
                      : own ? work->what() + ": " + e.what() : std::string(e.what());
    // Recorded before the work finishes: a caller who sees it fail (or, for a staged call,
    // sees its stream go on) and calls again finds the group failed.
    if (failure_.empty()) failure_ = reason;
  }
  if (own) {
    if (stopping) {
      work->finish(std::make_exception_ptr(GroupFailedError(
          "process group was destroyed while " + work->what() + " was running")));
    } else if (!earlier.empty()) {
      work->finish(std::make_exception_ptr(GroupFailedError(
          work->what() + " did not complete: the process group failed: " + earlier)));
    } else {
      work->finish(std::current_exception());
    }
  }
  failWith(reason);
}

void Communicator::reapP2P() {
  // Finished after the loop: a completion hook may post more (runHere).
  std::vector<std::unique_ptr<PendingP2P>> done;
  for (auto it = p2p_.begin(); it != p2p_.end();) {
    bool complete;
    try {
      complete = (*it)->poll();
    } catch (const std::exception& e) {
      std::unique_ptr<PendingP2P> failed = std::move(*it);
      p2p_.erase(it);
      for (auto& d : done) d->work->finish(nullptr);
      failed->work->finish(std::current_exception());
      throw GroupFailedError(failed->work->what() + ": " + e.what());
    }
    if (complete) {
      done.push_back(std::move(*it));
      it = p2p_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto& d : done) d->work->finish(nullptr);
}

void Communicator::progressIdle(Clock::time_point limit) {
  // Sleep until the links have something, a wake() (a new op, a waiter that drives), the
  // nearest transfer deadline or `limit` (a waiter's own): no periodic re-check. Every way
  // a posted transfer can complete passes through reapP2P (progressP2P), so nothing
  // completes unseen; the 10 ms re-check that stood here hid one that did not
  // (postInline's pass).
  auto until = limit;
  for (auto& p : p2p_) until = std::min(until, p->deadline);
  transport_->waitReady(until);
  progressP2P();
}

void Communicator::progressP2P() {
  DriverMark mark(this);
  try {
    transport_->progress();
  } catch (const PeerLostError&) {
    // A peer that finished and left is not the cause if a header that already
    // arrived shows a mismatch: reapP2P throws that instead.
    reapP2P();
    throw;
  }
  reapP2P();
}

bool Communicator::othersNeedWaking() const {
  if (!queue_.empty() || drivers_ > 0 || stopping_ || !failure_.empty()) return true;
  // p2p_ and the scratch are the driving thread's: while another thread drives, it decides
  // this itself when it stops.
  return !driving_ && (!p2p_.empty() || heldScratch() > kScratchKeepBytes);
}

void Communicator::workerLoop() {
  for (;;) {
    Op op;
    {
      std::unique_lock<std::mutex> lock(mu_);
      while ((queue_.empty() || driving_) && !stopping_) {
        if (driving_ || drivers_ > 0 || p2p_.empty()) {
          if (driving_ || heldScratch() <= kScratchKeepBytes) {
            cv_.wait(lock);
          } else if (!cv_.wait_for(lock, kScratchIdle, [this] {
                       // also sends and receives a waiting caller left to it (waitDriving)
                       return !queue_.empty() || stopping_ || (!driving_ && drivers_ == 0 && !p2p_.empty());
                     }) && !driving_) {
            // Idle for a while after a large op: give the scratch back (it is kept
            // across back-to-back large ops, where reallocating would cost page faults).
            // Not while a caller runs a call inline (driving_): that call is using it.
            scratchBytes_.store(0);
            std::vector<char>().swap(scratch_);
            std::vector<char>().swap(stage_);
          }
          continue;
        }
        idlePolling_ = driving_ = true;
        lock.unlock();
        try {
          progressIdle(Clock::time_point::max());
        } catch (const std::exception& e) {
          failWith(e.what());  // still driving: failPending drains p2p_ before anyone else may
        }
        lock.lock();
        idlePolling_ = driving_ = false;
        if (drivers_ > 0) {  // a caller waits to drive (waitDriving): wake it unlocked
          lock.unlock();
          cv_.notify_all();
          lock.lock();
        }
      }
      cv_.wait(lock, [this] { return !driving_; });  // stopping while an inline caller drives
      if (queue_.empty()) return;  // stopping, nothing left
      op = std::move(queue_.front());
      queue_.pop_front();
      driving_ = true;
    }
    runTaken(op);
    std::unique_lock<std::mutex> lock(mu_);
    driving_ = false;
    const bool wake = drivers_ > 0;  // a caller waits for the links (waitDriving)
    lock.unlock();
    if (wake) cv_.notify_all();
  }
}

void Communicator::runTaken(Op& op) {
  DriverMark mark(this);
  // A posted p2p op moves on to p2p_, so keep its Work at hand for the catch.
  std::shared_ptr<Work> work = workOf(op);
  if (auto* c = std::get_if<Collective>(&op)) runCollective(*c);
  try {
    if (auto* p2p = std::get_if<std::unique_ptr<PendingP2P>>(&op)) {
      postP2P(**p2p);
      p2p_.push_back(std::move(*p2p));
    }
    reapP2P();
    countBytesSent();
  } catch (const std::exception& e) {
    failRunning(work, e);
  }
}

void Communicator::failWith(const std::string& message) {
  std::deque<Op> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failure_.empty()) failure_ = message;
    dropped.swap(queue_);
  }
  // Aborting every link makes the neighbours fail at once, and theirs in turn.
  for (Link* l : links_) {
    if (l != nullptr) l->abort();
  }
  failPending(std::move(dropped), "the process group failed: " + message);
}

void Communicator::failPending(std::deque<Op> dropped, const std::string& reason) {
  DriverMark mark(this);
  for (auto& op : dropped) {
    Work& work = *workOf(op);
    work.finish(std::make_exception_ptr(GroupFailedError(work.what() + " was not run: " + reason)));
  }
  for (auto& p : p2p_) {
    p->work->finish(std::make_exception_ptr(GroupFailedError(p->work->what() + " did not complete: " + reason)));
  }
  p2p_.clear();
}

void Communicator::abort(const std::string& reason) {
  if (!owner_.here()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failure_.empty()) failure_ = reason;  // queued and later calls fail naming it
  }
  cv_.notify_all();
  transport_->wake();
  transport_->cancelConnect();  // a link being made gives up; peers that dial us are refused
  // Thread-safe: shutdown(2) only; the running op fails on the worker, which then
  // fails what is queued, and the peers see the links close.
  for (Link* l : links_) {
    if (l != nullptr) l->interrupt();
  }
}

void Communicator::shutdown() {
  if (!owner_.here()) {
    // A forked child: no worker thread exists here, the descriptors were closed at
    // fork, and the locks may be held by threads that were not copied. Touch nothing;
    // the destructor leaks the worker's handle rather than join or detach a thread that
    // does not exist here.
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  cv_.notify_all();
  transport_->wake();
  transport_->cancelConnect();  // a worker making a link gives up at once
  // Wakes a worker blocked on a link; the link's own state is left to the worker.
  for (Link* l : links_) {
    if (l != nullptr) l->interrupt();
  }
  if (worker_.joinable()) worker_.join();
  std::deque<Op> dropped;
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return !driving_; });  // an inline caller ends: its links are shut down
    driving_ = true;  // for good: nobody drives a stopped group (the driving rule, above)
    dropped.swap(queue_);
  }
  failPending(std::move(dropped), "the process group was destroyed");
  closeStaging();
  transport_->close();
}

}  // namespace pycollect
