// The communicator's queue and worker (communicator.h): how a call runs, and how a group
// fails or ends.
//
// A collective is numbered at enqueue (one sequence per group). A blocking caller with
// nothing queued ahead of it runs its collective inline, on its own thread (driving_: the
// worker stands aside meanwhile), which saves two thread hand-offs per small call;
// otherwise it is queued and the worker runs the queue in order. Sends and receives never
// queue behind collectives: they go to the point-to-point engine (p2p_, comm/p2p.h),
// posted at once by their caller when no other thread drives the links (issueP2P; a
// blocking one with nothing queued is driven to its end there), else handed to the driving
// thread (submitted_), which takes them at its next look: between collectives, or inside a
// collective's waits, which poll the messages too (messages_). Messages still in flight
// are progressed by the worker while idle (progressIdle), or by a caller that waits on one.
//
// Failure. A call that fails fails the group (failRunning -> failWith): its message is
// kept, every link is aborted so the neighbours fail within milliseconds, and every
// queued or posted call is finished with an error naming the cause (failPending, also
// shutdown's, with "the process group was destroyed"). abort() does the same from any
// thread: it records the reason and interrupts the links, so the running call fails on
// the worker, which then fails the rest; sends and receives left posted are failed by the
// next thread that drives (the worker, or a waiter in driveUntil) as soon as it sees the
// reason, whether or not a link has anything to say ([Note: calls left posted by an abort]).
//
// [Note: the driving rule] Several threads may run the engine: the worker, a caller that
// runs its blocking call inline (enqueue), a caller that posts its send or recv (issueP2P),
// and a waiter that runs its queued call or drives the links while it waits (waitDriving:
// runCollective, then the drive loop). At most one of them drives at a time: the thread that
// set driving_ (under mu_) when it was false. The driving thread, and no other, may touch
//   - the links and the transport's progress (progress, waitReady; wake() and a link's
//     interrupt() are the exceptions: any thread),
//   - p2p_ (post, poll, and failPending's drain),
//   - scratch_ and stage_ (the algorithms' memory),
// until it clears driving_ (under mu_). So a failure found while driving is handed on
// (failWith, failPending) before driving_ is cleared, never after. Everything else that
// threads share is read or written under mu_: queue_, submitted_, failure_, stopping_,
// drivers_ and driving_ itself; a thread that does not drive reads p2p_ and the scratch
// only while driving_ is false (othersNeedWaking). A thread that submits while another
// drives wakes the transport, so that the driver's wait returns and takes it; a driver
// that lets go with something submitted wakes the worker. shutdown() takes driving_ for
// good once the worker has joined and the last driver has let go, then drains what is left.
//
// [Note: calls from a completion] A Work's completion hooks (Work::whenDone: the torch
// backend completes torch's Futures there, whose callbacks may issue more calls, as DDP's
// PowerSGD hook does, and wait for them) run on the thread that finished the op, which
// still drives the group (DriverMark says so), between calls: a collective's when it
// ended, a message's when the engine found it complete outside a collective. A message
// completed inside a collective's wait (where no call may start) keeps its hooks until
// the collective ended (runDeferredHooks), unless a thread waiting for it runs them first
// (Work::wait). A call issued from a hook on the driving thread cannot be left to the
// worker, which may be this very thread: enqueue runs a collective on the spot (runHere),
// after whatever was queued before it; a send or recv is posted on the spot; and a wait
// for either drives the group right there (waitDriving -> driveUntil). The engine finishes
// Works after it is done with its own lists (PointToPoint::poll), so a hook may post more.
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <deque>

#include "comm/communicator.h"
#include "common/error.h"
#include "common/interrupt.h"
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

flight::Call Communicator::flightCall(const WireHeader& h) {
  flight::Call c;
  c.seq = h.seq;
  c.kind = h.kind;
  c.dtype = h.dtype;
  c.algo = h.algo;
  c.root = h.root;
  c.count = h.count;
  return c;
}

void Communicator::checkIssuable() const {
  if (!failure_.empty()) {
    throw GroupFailedError("process group failed earlier; no further calls are possible: " + failure_);
  }
  if (stopping_) throw GroupFailedError("process group was destroyed");
  if (!connected_) throw InvalidArgument("communicator is not connected");
}

std::shared_ptr<Work> Communicator::enqueue(Collective c) {
  checkNotForked();
  std::unique_lock<std::mutex> lock(mu_);
  checkIssuable();
  c.header.seq = seq_++;
  auto work = c.makeWork ? c.makeWork("rank " + std::to_string(rank_) + " " + describeCall(c.header))
                         : std::make_shared<Work>(rank_, c.header);
  c.work = work;
  const auto issued = Clock::now();  // run here at once: also when it started, and its deadline's start
  work->setFlight(flight_.issued(flightCall(c.header), issued));
  ++calls_[c.header.kind];
  c.trace = tracing_.load(std::memory_order_relaxed);
  if (tDriver == this) {  // issued by a completion hook on the driving thread
    std::deque<Collective> ahead;
    ahead.swap(queue_);
    ahead.push_back(std::move(c));
    lock.unlock();
    runHere(ahead);
    return work;
  }
  if (tInline && queue_.empty() && !driving_) {
    driving_ = true;  // the worker waits for us; nobody else touches the links meanwhile
    lock.unlock();
    runCollective(c, issued);
    lock.lock();
    driving_ = false;
    const bool wake = othersNeedWaking();
    lock.unlock();  // notify unlocked: a thread woken under the lock would only block on it
    if (wake) cv_.notify_all();
    return work;
  }
  queue_.push_back(std::move(c));
  if (drivers_ > 0) {
    cv_.notify_all();  // callers wait on cv_ too (waitDriving): the worker must hear it
  } else {
    cv_.notify_one();
  }
  if (idlePolling_) transport_->wake();
  return work;
}

std::shared_ptr<Work> Communicator::issueP2P(std::unique_ptr<P2POp> op) {
  checkNotForked();
  std::unique_lock<std::mutex> lock(mu_);
  checkIssuable();
  // Described only when asked (an error, Python's Work.what), as a collective's Work is.
  std::shared_ptr<Work> work;
  if (op->send) {
    work = std::make_shared<Work>(rank_, op->call);
  } else {
    work = std::make_shared<RecvWork>(rank_, op->call);
  }
  op->work = work;
  // Numbered now, under the lock: sends are posted in the order issued (whoever posts takes
  // what was submitted before it first), so the numbers follow each pair's order on the wire.
  if (op->send) op->id = op->call.seq = sendSeq_[op->peer]++;
  flight::Call call = flightCall(op->call);
  call.peer = op->peer == kAnySource ? flight::kAnyPeer : op->peer;
  call.send = op->send;
  const auto now = Clock::now();  // one read: its record, its posting and its deadline's start
  work->setFlight(flight_.issued(call, now));
  ++calls_[static_cast<size_t>(OpKind::kSend)];  // send and recv both count as "send/recv"
  op->posted = now;
  op->deadline = deadlineFromNow(-1, now);
  if (tDriver == this) {  // issued by a completion hook on the driving thread: post it here
    lock.unlock();
    try {
      takeSubmitted();
      p2p_.post(std::move(op));
      progressP2P();
    } catch (const std::exception& e) {
      failWith(e.what());
    }
    return work;
  }
  if (driving_) {  // another thread drives: its next look takes it (its wait is woken for that)
    submitted_.push_back(std::move(op));
    anySubmitted_.store(true, std::memory_order_release);
    lock.unlock();
    transport_->wake();
    return work;
  }
  // Posted here, so that a small send's bytes leave now and a receive takes what already
  // came, without waking the worker first. A blocking call with nothing queued is driven
  // to its end here (the caller waits for it anyway); the worker carries on the others.
  const bool toTheEnd = tInline && queue_.empty();
  const auto backstop = op->deadline + std::chrono::seconds(1);  // its own timeout (naming it) comes first
  driving_ = true;
  lock.unlock();
  {
    DriverMark mark(this);
    try {
      takeSubmitted();
      p2p_.post(std::move(op));
      progressP2P();
      if (toTheEnd && !work->isCompleted()) driveUntil(work, backstop, false);
    } catch (const std::exception& e) {
      if (toTheEnd) {
        failRunning(work, e);  // the caller's call gets the cause itself (a lost peer, an interrupt)
      } else {
        failWith(e.what());
      }
    }
  }
  lock.lock();
  driving_ = false;
  const bool wake = othersNeedWaking();
  lock.unlock();
  if (wake) cv_.notify_all();
  return work;
}

void Communicator::takeSubmitted() {
  if (!anySubmitted_.load(std::memory_order_acquire)) return;
  std::vector<std::unique_ptr<P2POp>> ops;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ops.swap(submitted_);
    anySubmitted_.store(false, std::memory_order_relaxed);
  }
  for (size_t i = 0; i < ops.size(); ++i) {
    try {
      p2p_.post(std::move(ops[i]));
    } catch (...) {
      // The group fails: what was not posted goes back, for failPending to finish.
      std::lock_guard<std::mutex> lock(mu_);
      submitted_.insert(submitted_.begin(), std::make_move_iterator(ops.begin() + i + 1),
                        std::make_move_iterator(ops.end()));
      anySubmitted_.store(!submitted_.empty(), std::memory_order_relaxed);
      throw;
    }
  }
}

void Communicator::Messages::poll() {
  // A message's failure found here (a receive too small for its message) is the group's,
  // not the running collective's: kept, and the group fails once the collective ended.
  // Deadlines are checked between calls (progressP2P), for the same reason.
  if (!failure.empty()) return;
  try {
    comm.takeSubmitted();
    comm.p2p_.poll(Clock::time_point(), false);  // the time is only for deadlines
  } catch (const std::exception& e) {
    failure = e.what();
  }
}

bool Communicator::waitDriving(const std::shared_ptr<Work>& work, double timeoutSec) {
  checkNotForked();
  const bool limited = timeoutSec >= 0;
  const auto deadline = limited ? deadlineFromNow(timeoutSec) : Clock::time_point::max();
  if (tDriver == this) {
    // A completion hook waits, on the thread that drives the group, for a call it issued:
    // nobody else may drive now, so this thread does (collectives queued meanwhile too,
    // which enqueue wakes it for, as it wakes an idle worker).
    if (!work->isCompleted()) {
      bool wasPolling;
      {
        std::lock_guard<std::mutex> lock(mu_);
        wasPolling = idlePolling_;
        idlePolling_ = true;
      }
      try {
        driveUntil(work, deadline, true);
      } catch (const std::exception& e) {
        failWith(e.what());
      }
      std::lock_guard<std::mutex> lock(mu_);
      idlePolling_ = wasPolling;
    }
  } else if (!work->isCompleted()) {
    std::unique_lock<std::mutex> lock(mu_);
    if (tInline && !driving_ && !stopping_ && failure_.empty() && !queue_.empty() && queue_.front().work == work) {
      Collective c = std::move(queue_.front());
      queue_.pop_front();
      driving_ = true;
      lock.unlock();
      runCollective(c);
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
      const bool drive = !driving_ && !work->isCompleted() && !others() && !p2pIdle();
      if (drive) idlePolling_ = driving_ = true;  // enqueue wakes us for what it queues
      while (drive) {
        lock.unlock();
        std::string error;
        try {
          DriverMark mark(this);
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
        if (work->isCompleted() || others() || p2pIdle() || Clock::now() >= deadline) break;
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

void Communicator::driveUntil(const std::shared_ptr<Work>& work, Clock::time_point limit, bool runQueued) {
  DriverMark mark(this);
  const auto spinEnd = std::min(limit, Clock::now() + std::chrono::microseconds(options_.tunables.spinUs));
  do {
    progressP2P();
    if (work->isCompleted()) return;
  } while (Clock::now() < spinEnd);
  // On a thread that runs the host program too, sleep in slices and ask it between them.
  const bool checks = interrupt::installed();
  auto nextCheck = Clock::now() + interrupt::kCheckEvery;
  for (;;) {
    std::deque<Collective> queued;
    std::string failure;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;  // shutdown() fails what is left once the driver lets go
      failure = failure_;
      if (failure.empty() && runQueued) queued.swap(queue_);
    }
    if (!failure.empty()) {  // abort() from another thread: fail what is posted, this call too
      failWith(failure);
      return;
    }
    runHere(queued);
    progressP2P();
    if (work->isCompleted()) return;
    const auto now = Clock::now();
    if (now >= limit) return;
    if (checks && now >= nextCheck) {
      if (interrupt::requested()) {
        throw Interrupted("interrupted by the program's signal handler (e.g. Ctrl-C, KeyboardInterrupt) "
                          "while waiting: " + work->what());
      }
      nextCheck = now + interrupt::kCheckEvery;
    }
    progressIdle(checks ? std::min(limit, nextCheck) : limit);
    if (work->isCompleted()) return;
  }
}

void Communicator::runHere(std::deque<Collective>& ops) {
  // What was queued ahead runs as the worker would run it; the hook's own call, last.
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
    Collective c = std::move(ops.front());
    ops.pop_front();
    runCollective(c);
  }
}

void Communicator::runCollective(Collective& c, Clock::time_point start) {
  DriverMark mark(this);
  trace::Recorder::Scope traced(c.trace ? &recorder_ : nullptr, c.header.kind, c.header.seq);
  // Messages completed by this call's waits keep their hooks until it ended: a hook may
  // issue calls, and none may start inside this one.
  struct Deferring {
    explicit Deferring(PointToPoint& p) : p2p(p), saved(p.deferringHooks()) { p2p.deferHooks(true); }
    ~Deferring() { p2p.deferHooks(saved); }
    PointToPoint& p2p;
    bool saved;
  };
  std::exception_ptr error;
  {
    Deferring deferring(p2p_);
    messages_.failure.clear();
    try {
      c.work->flight().started(start);
      Context ctx(rank_, size_, *transport_, links_, &messages_, c.header, deadlineFromNow(c.timeoutSec, start), start,
                  options_.tunables, scratch_);
      ctx.setFlight(&c.work->flight());
      ctx.setHierarchy(&hierarchy_, &stage_);
      ctx.setArena(&arena_);
      if (arena_.ready()) arena_.announce(c.header);
      c.run(ctx);
      ctx.drainSends();  // header sends of early-returning algorithms
      scratchBytes_.store(heldScratch());
      countBytesSent();
    } catch (...) {
      error = std::current_exception();
    }
  }
  // Finished once its waits are over: its hooks may issue calls of their own.
  if (!error) {
    try {
      c.work->finish(nullptr);
    } catch (const std::exception& e) {
      failWith(e.what());  // a hook's own failure
    }
  } else {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      failRunning(c.work, e);
    }
  }
  if (!messages_.failure.empty()) {
    std::string failure;
    failure.swap(messages_.failure);
    failWith(failure);
  }
  runDeferredHooks();
}

void Communicator::runDeferredHooks() {
  if (p2p_.deferringHooks()) return;  // still inside a collective: at its end
  for (auto& w : p2p_.takeDeferred()) w->runHooks();
}

void Communicator::failRunning(const std::shared_ptr<Work>& work, const std::exception& e) {
  bool stopping;
  std::string earlier;  // abort() failed the group first: what broke this op is its doing
  std::string reason;   // what the group failed of
  bool own = !work->isCompleted();  // a message's failure found by the engine finished its own work
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

void Communicator::progressIdle(Clock::time_point limit) {
  // Sleep until the links have something, a wake() (a new call, a message submitted, a
  // waiter that drives), the nearest message deadline or `limit` (a waiter's own): no
  // periodic re-check. Every way a message can complete passes through progressP2P.
  const auto until = std::min(limit, p2p_.nextDeadline());
  if (!anySubmitted_.load(std::memory_order_acquire)) transport_->waitReady(until);
  progressP2P();
}

void Communicator::progressP2P() {
  DriverMark mark(this);
  takeSubmitted();
  // A few passes while frames arrive: the payload behind a frame is often there already.
  for (int pass = 0; pass < 4; ++pass) {
    try {
      transport_->progress();
    } catch (const PeerLostError&) {
      // What a peer sent before it left is delivered (and a message that could not fit is
      // named) before its leaving fails the group.
      p2p_.poll(Clock::now(), false);
      throw;
    }
    if (!p2p_.poll(Clock::now(), true)) break;
  }
  runDeferredHooks();
}

bool Communicator::othersNeedWaking() const {
  if (!queue_.empty() || drivers_ > 0 || stopping_ || !failure_.empty()) return true;
  // p2p_ and the scratch are the driving thread's: while another thread drives, it decides
  // this itself when it stops.
  return !driving_ && (!p2pIdle() || heldScratch() > kScratchKeepBytes);
}

namespace {

// [Note: the worker's wake-up] A caller's thread and the group's worker often share a core
// (pinned ranks; and unpinned, Linux keeps a process's threads where they woke each other).
// A call queued for the worker wakes it, and a woken thread of the normal class preempts
// the one that woke it: the caller, who was about to wait for that call and run it itself
// (waitDriving), waits instead for the worker to run it and wake it back, 7-10 us for an
// 8-byte call where 3-5 would do, or 30-40 in stretches (docs/measurements.md). So the
// worker sleeps with nothing to do in SCHED_BATCH, whose wake-ups preempt nobody: it runs
// when the core is free (the caller waits or sleeps) or at the caller's next time slice
// (a few ms at most, for a call nobody waits on). It takes the normal class back to run a
// call, poll the links or fail what a failure left, so the wake-ups inside a call preempt
// as before. A worker started in another class (a real-time program's) keeps it.
class WorkerClass {
 public:
  void set(bool batch) {
    if (batch == batch_) return;
    batch_ = batch;  // for the loop, whether or not the class could change
#ifdef SCHED_BATCH
    if (!normal_) return;
    sched_param none{};
    pthread_setschedparam(pthread_self(), batch ? SCHED_BATCH : SCHED_OTHER, &none);  // refused: no harm
#endif
  }
  bool batch() const { return batch_; }

 private:
  bool batch_ = false;
#ifdef SCHED_BATCH
  const bool normal_ = sched_getscheduler(0) == SCHED_OTHER;
#endif
};

}  // namespace

void Communicator::workerLoop() {
  WorkerClass sleeping;
  for (;;) {
    Collective c;
    {
      std::unique_lock<std::mutex> lock(mu_);
      while ((queue_.empty() || driving_) && !stopping_) {
        if (!failure_.empty() && !driving_ && !p2pIdle()) {
          // [Note: calls left posted by an abort] abort() failed the group from another
          // thread: finish what is still posted now. Nothing on the links need throw (a
          // shared-memory link not busy is not even watched), and the idle poll below
          // would sleep until the calls' deadlines.
          driving_ = true;
          const std::string failure = failure_;
          lock.unlock();
          sleeping.set(false);
          failWith(failure);
          lock.lock();
          driving_ = false;
          continue;
        }
        if (driving_ || drivers_ > 0 || p2pIdle()) {
          if (!sleeping.batch()) {  // [Note: the worker's wake-up]
            lock.unlock();
            sleeping.set(true);
            lock.lock();
            continue;
          }
          if (driving_ || heldScratch() <= kScratchKeepBytes) {
            cv_.wait(lock);
          } else if (!cv_.wait_for(lock, kScratchIdle, [this] {
                       // also messages a waiting caller left to it (waitDriving)
                       return !queue_.empty() || stopping_ || (!driving_ && drivers_ == 0 && !p2pIdle());
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
        sleeping.set(false);
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
      c = std::move(queue_.front());
      queue_.pop_front();
      driving_ = true;
    }
    sleeping.set(false);
    runCollective(c);
    std::unique_lock<std::mutex> lock(mu_);
    driving_ = false;
    const bool wake = drivers_ > 0;  // a caller waits for the links (waitDriving)
    lock.unlock();
    if (wake) cv_.notify_all();
  }
}

void Communicator::failWith(const std::string& message) {
  std::deque<Collective> dropped;
  std::string cause;  // the group's first failure: an abort's reason, not the closed links it made
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failure_.empty()) failure_ = message;
    cause = failure_;
    dropped.swap(queue_);
  }
  arena_.poison(cause);  // peers waiting in a shared-memory call stop at once
  // Aborting every link makes the neighbours fail at once, and theirs in turn.
  for (auto* links : {&links_, &p2pLinks_}) {
    for (Link* l : *links) {
      if (l != nullptr) l->abort();
    }
  }
  failPending(std::move(dropped), "the process group failed: " + cause);
}

void Communicator::failPending(std::deque<Collective> dropped, const std::string& reason) {
  DriverMark mark(this);
  for (auto& c : dropped) {
    c.work->finish(std::make_exception_ptr(GroupFailedError(c.work->what() + " was not run: " + reason)));
  }
  std::vector<std::unique_ptr<P2POp>> submitted;
  {
    std::lock_guard<std::mutex> lock(mu_);
    submitted.swap(submitted_);
    anySubmitted_.store(false, std::memory_order_relaxed);
  }
  for (auto& op : submitted) {
    op->work->finish(std::make_exception_ptr(GroupFailedError(op->work->what() + " was not run: " + reason)));
  }
  p2p_.failAll(reason);
  runDeferredHooks();
}

void Communicator::abort(const std::string& reason) {
  if (!owner_.here()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failure_.empty()) failure_ = reason;  // queued and later calls fail naming it
  }
  transport_->cancelConnect();  // a link being made gives up; peers that dial us are refused
  // Thread-safe: shutdown(2) only; the running op fails on the worker, which then
  // fails what is queued and posted, and the peers see the links close. Interrupted
  // before the driver is woken, so that the driver finds them so.
  for (auto* links : {&links_, &p2pLinks_}) {
    for (Link* l : *links) {
      if (l != nullptr) l->interrupt();
    }
  }
  cv_.notify_all();
  transport_->wake();
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
  for (auto* links : {&links_, &p2pLinks_}) {
    for (Link* l : *links) {
      if (l != nullptr) l->interrupt();
    }
  }
  if (worker_.joinable()) worker_.join();
  std::deque<Collective> dropped;
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
