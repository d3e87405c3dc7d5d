#include "comm/communicator.h"

#include <unistd.h>

#include <algorithm>

#include "collectives/collectives.h"
#include "common/error.h"
#include "reduce/reduce.h"

namespace pycollect {
namespace {

// What kAuto means: the direct algorithm for small messages on small groups (one
// round instead of 2(size-1)), the ring otherwise.
Algo chooseAllreduce(const CommOptions& o, int size, size_t bytes) {
  if (size > 1 && size <= o.directMaxRanks && bytes <= o.directMaxBytes) return Algo::kDirect;
  return Algo::kRing;
}

}  // namespace

Communicator::Communicator(int rank, int size, CommOptions options)
    : owner_(), rank_(rank), size_(size), options_(options), sendSeq_(size, 0), recvSeq_(size, 0) {
  if (size < 1) throw InvalidArgument("world size must be >= 1, got " + std::to_string(size));
  if (rank < 0 || rank >= size) {
    throw InvalidArgument("rank " + std::to_string(rank) + " is outside [0, " +
                          std::to_string(size) + ")");
  }
  TransportOptions to;
  to.rank = rank;
  to.size = size;
  to.timeoutSec = options_.timeoutSec;
  to.socketBuffer = options_.socketBuffer;
  to.secret = options_.secret;
  to.linkTimeoutSec = options_.linkTimeoutSec > 0 ? options_.linkTimeoutSec : kDefaultLinkTimeoutSec;
  to.hostTag = options_.hostTag;
  transport_ = makeTransport(options_.transport, to);
}

Communicator::~Communicator() {
  if (!owner_.here()) {
    // A std::thread still "joinable" would terminate the process when destroyed: move
    // it into memory that is never freed (the thread itself was not copied by fork).
    new std::thread(std::move(worker_));
    return;
  }
  shutdown();
}

void Communicator::checkNotForked() const {
  if (owner_.here()) return;
  throw GroupFailedError("this process (pid " + std::to_string(::getpid()) + ") is a fork of pid " +
                         std::to_string(owner_.pid()) +
                         ", which made this process group; a forked child cannot use its parent's "
                         "groups (their sockets were closed in the child at fork): call "
                         "init_process_group in the child instead");
}

std::pair<std::string, int> Communicator::listen(const std::string& host) {
  checkNotForked();
  Endpoint e = transport_->listen(host);
  return {e.host, e.port};
}

void Communicator::connect(const std::vector<std::string>& hosts, const std::vector<int>& ports,
                           uint64_t token) {
  checkNotForked();
  if (connected_) throw InvalidArgument("communicator is already connected");
  if (hosts.size() != ports.size()) {
    throw InvalidArgument("connect: need one host and one port per rank");
  }
  std::vector<Endpoint> peers;
  for (size_t i = 0; i < hosts.size(); ++i) peers.push_back({hosts[i], ports[i]});
  links_ = transport_->connect(peers, token);
  std::lock_guard<std::mutex> lock(mu_);
  connected_ = true;
  worker_ = std::thread([this] { workerLoop(); });
}

WireHeader Communicator::makeHeader(OpKind kind, DType dtype, ReduceOp op, size_t count, int root) {
  checkReduction(op, dtype);  // every call passes here; non-reductions pass kSum
  WireHeader h;
  h.kind = static_cast<uint8_t>(kind);
  h.dtype = static_cast<uint8_t>(dtype);
  h.redop = static_cast<uint8_t>(op);
  h.count = count;
  h.root = root;
  h.rank = rank_;
  return h;
}

void Communicator::checkPeer(int peer, const char* what) const {
  if (peer < 0 || peer >= size_) {
    throw InvalidArgument(std::string(what) + ": rank " + std::to_string(peer) +
                          " is outside the group [0, " + std::to_string(size_) + ")");
  }
  if (peer == rank_) {
    throw InvalidArgument(std::string(what) + ": rank " + std::to_string(peer) +
                          " is this rank itself");
  }
}

WireHeader& Communicator::headerOf(Op& op) {
  if (auto* p2p = std::get_if<std::unique_ptr<PendingP2P>>(&op)) return (*p2p)->header;
  return std::get<Collective>(op).header;
}

std::shared_ptr<Work>& Communicator::workOf(Op& op) {
  if (auto* p2p = std::get_if<std::unique_ptr<PendingP2P>>(&op)) return (*p2p)->work;
  return std::get<Collective>(op).work;
}

std::shared_ptr<Work> Communicator::enqueue(Op op) {
  checkNotForked();
  std::lock_guard<std::mutex> lock(mu_);
  if (!failure_.empty()) {
    throw GroupFailedError("process group failed earlier; no further calls are possible: " + failure_);
  }
  if (stopping_) throw GroupFailedError("process group was destroyed");
  if (!connected_) throw InvalidArgument("communicator is not connected");
  WireHeader& header = headerOf(op);
  if (auto* p2p = std::get_if<std::unique_ptr<PendingP2P>>(&op)) {
    // p2p messages are numbered per pair and direction.
    auto& seqs = (*p2p)->isSend ? sendSeq_ : recvSeq_;
    header.seq = seqs[(*p2p)->peer]++;
  } else {
    header.seq = seq_++;
  }
  auto work = std::make_shared<Work>("rank " + std::to_string(rank_) + " " + describeCall(header));
  workOf(op) = work;
  ++calls_[opKindName(static_cast<OpKind>(header.kind))];  // send and recv both count as "send/recv"
  queue_.push_back(std::move(op));
  cv_.notify_one();
  if (idlePolling_) transport_->wake();
  return work;
}

std::shared_ptr<Work> Communicator::allReduce(void* data, size_t count, DType dtype, ReduceOp op,
                                              Algo algo) {
  // The header carries the algorithm that runs, so ranks that chose differently
  // (e.g. a different PYCOLLECT_ALGO) fail with a mismatch instead of hanging.
  Algo chosen = algo == Algo::kAuto ? chooseAllreduce(options_, size_, count * dtypeSize(dtype)) : algo;
  WireHeader h = makeHeader(OpKind::kAllReduce, dtype, op, count, -1);
  h.algo = static_cast<uint8_t>(chosen);
  if (chosen == Algo::kRing) {
    return enqueue(h, [=](Context& c) { allreduceRing(c, data, count, dtype, op); });
  }
  return enqueue(h, [=](Context& c) { allreduceDirect(c, data, count, dtype, op); });
}

std::shared_ptr<Work> Communicator::allGather(const void* in, void* out, size_t count, DType dtype) {
  WireHeader h = makeHeader(OpKind::kAllGather, dtype, ReduceOp::kSum, count, -1);
  return enqueue(h, [=](Context& c) { allgatherRing(c, in, out, count, dtype); });
}

std::shared_ptr<Work> Communicator::reduceScatter(const void* in, void* out, size_t count,
                                                  DType dtype, ReduceOp op) {
  WireHeader h = makeHeader(OpKind::kReduceScatter, dtype, op, count, -1);
  return enqueue(h, [=](Context& c) { reduceScatterRing(c, in, out, count, dtype, op); });
}

std::shared_ptr<Work> Communicator::broadcast(void* data, size_t count, DType dtype, int root) {
  if (root < 0 || root >= size_) {
    throw InvalidArgument("broadcast: root " + std::to_string(root) + " is outside the group [0, " +
                          std::to_string(size_) + ")");
  }
  WireHeader h = makeHeader(OpKind::kBroadcast, dtype, ReduceOp::kSum, count, root);
  size_t bytes = count * dtypeSize(dtype);
  return enqueue(h, [=](Context& c) { broadcastChain(c, data, bytes, root); });
}

std::shared_ptr<Work> Communicator::barrier() {
  WireHeader h = makeHeader(OpKind::kBarrier, DType::kUInt8, ReduceOp::kSum, 0, -1);
  return enqueue(h, [](Context& c) { barrierAll(c); });
}

std::shared_ptr<Work> Communicator::enqueueP2P(bool isSend, void* data, size_t count, DType dtype,
                                               int peer, int tag) {
  checkPeer(peer, isSend ? "send" : "recv");
  auto p = std::make_unique<PendingP2P>();
  p->isSend = isSend;
  p->peer = peer;
  p->self = rank_;
  p->data = data;
  p->bytes = count * dtypeSize(dtype);
  p->header = makeHeader(OpKind::kSend, dtype, ReduceOp::kSum, count, tag);
  if (!isSend) p->header.rank = peer;  // the header we expect was written by the peer
  return enqueue(std::move(p));
}

std::shared_ptr<Work> Communicator::send(const void* data, size_t count, DType dtype, int peer,
                                         int tag) {
  return enqueueP2P(true, const_cast<void*>(data), count, dtype, peer, tag);
}

std::shared_ptr<Work> Communicator::recv(void* data, size_t count, DType dtype, int peer, int tag) {
  return enqueueP2P(false, data, count, dtype, peer, tag);
}

Clock::time_point Communicator::deadlineFromNow() const {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(options_.timeoutSec));
}

void Communicator::reapP2P() {
  for (auto it = p2p_.begin(); it != p2p_.end();) {
    PendingP2P& p = **it;
    bool done;
    try {
      done = p.poll();
    } catch (const std::exception& e) {
      p.work->finish(std::current_exception());
      std::string message = p.work->what() + ": " + e.what();
      p2p_.erase(it);
      throw GroupFailedError(message);
    }
    if (done) {
      p.work->finish(nullptr);
      it = p2p_.erase(it);
    } else {
      ++it;
    }
  }
}

void Communicator::progressIdle() {
  // Wake at the nearest transfer deadline, and at least once a second.
  auto until = Clock::now() + std::chrono::seconds(1);
  for (auto& p : p2p_) until = std::min(until, p->deadline);
  transport_->waitReady(until);
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

void Communicator::workerLoop() {
  for (;;) {
    Op op;
    {
      std::unique_lock<std::mutex> lock(mu_);
      while (queue_.empty() && !stopping_) {
        if (p2p_.empty()) {
          if (scratch_.capacity() <= kScratchKeepBytes) {
            cv_.wait(lock);
          } else if (!cv_.wait_for(lock, kScratchIdle, [this] { return !queue_.empty() || stopping_; })) {
            // Idle for a while after a large op: give the scratch back (it is kept
            // across back-to-back large ops, where reallocating would cost page faults).
            scratchBytes_.store(0);
            std::vector<char>().swap(scratch_);
          }
          continue;
        }
        idlePolling_ = true;
        lock.unlock();
        std::string error;
        try {
          progressIdle();
        } catch (const std::exception& e) {
          error = e.what();
        }
        lock.lock();
        idlePolling_ = false;
        if (!error.empty()) {
          lock.unlock();
          failWith(error);
          lock.lock();
        }
      }
      if (queue_.empty()) return;  // stopping, nothing left
      op = std::move(queue_.front());
      queue_.pop_front();
    }
    // A posted p2p op moves on to p2p_, so keep its Work at hand for the catch.
    std::shared_ptr<Work> work = workOf(op);
    try {
      if (auto* p2p = std::get_if<std::unique_ptr<PendingP2P>>(&op)) {
        (*p2p)->post(links_[(*p2p)->peer], deadlineFromNow());
        p2p_.push_back(std::move(*p2p));
      } else {
        Collective& c = std::get<Collective>(op);
        Context ctx(rank_, size_, *transport_, links_, c.header, deadlineFromNow(),
                    options_.tunables, scratch_);
        c.run(ctx);
        ctx.drainSends();  // header sends of early-returning algorithms
        scratchBytes_.store(scratch_.capacity());
        countBytesSent();
        work->finish(nullptr);
      }
      reapP2P();
      countBytesSent();
    } catch (const std::exception& e) {
      bool stopping;
      {
        std::lock_guard<std::mutex> lock(mu_);
        stopping = stopping_;
      }
      bool own = !work->isCompleted();  // a p2p failure found by reapP2P finished its own work
      if (own) {
        work->finish(stopping ? std::make_exception_ptr(GroupFailedError(
                                    "process group was destroyed while " + work->what() +
                                    " was running"))
                              : std::current_exception());
      }
      std::string message = own ? work->what() + ": " + e.what() : std::string(e.what());
      failWith(stopping ? "process group was destroyed" : message);
    }
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
  for (auto& op : dropped) {
    Work& work = *workOf(op);
    work.finish(std::make_exception_ptr(
        GroupFailedError(work.what() + " was not run: the process group failed: " + message)));
  }
  for (auto& p : p2p_) {
    p->work->finish(std::make_exception_ptr(
        GroupFailedError(p->work->what() + " did not complete: the process group failed: " + message)));
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
  // Wakes a worker blocked on a link; the link's own state is left to the worker.
  for (Link* l : links_) {
    if (l != nullptr) l->interrupt();
  }
  if (worker_.joinable()) worker_.join();
  std::deque<Op> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    dropped.swap(queue_);
  }
  for (auto& op : dropped) {
    Work& work = *workOf(op);
    work.finish(std::make_exception_ptr(
        GroupFailedError(work.what() + " was not run: the process group was destroyed")));
  }
  for (auto& p : p2p_) {
    p->work->finish(std::make_exception_ptr(
        GroupFailedError(p->work->what() + " did not complete: the process group was destroyed")));
  }
  p2p_.clear();
  transport_->close();
}

bool Communicator::failed() {
  if (!owner_.here()) return true;
  std::lock_guard<std::mutex> lock(mu_);
  return !failure_.empty();
}

std::string Communicator::failure() {
  if (!owner_.here()) return "the process group belongs to pid " + std::to_string(owner_.pid());
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

size_t Communicator::scratchBytes() const { return scratchBytes_.load(); }

uint64_t Communicator::bytesSent() const { return bytesSent_.load(); }

void Communicator::countBytesSent() {
  uint64_t total = 0;
  for (Link* l : links_) {
    if (l != nullptr) total += l->bytesPosted();
  }
  bytesSent_.store(total);
}

std::map<int, std::string> Communicator::linkKinds() {
  checkNotForked();
  std::map<int, std::string> kinds;
  for (int p = 0; p < static_cast<int>(links_.size()); ++p) {
    if (links_[p] != nullptr) kinds[p] = transport_->linkKind(p);
  }
  return kinds;
}

std::map<std::string, uint64_t> Communicator::counters() {
  checkNotForked();
  std::lock_guard<std::mutex> lock(mu_);
  return calls_;
}

}  // namespace pycollect
