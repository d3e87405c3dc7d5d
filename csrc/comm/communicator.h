// A Communicator is one group's engine: its links (a full mesh, made and driven
// by a Transport from makeTransport), a queue of operations, and one worker
// thread that runs them in the order they were issued.
// Python holds it through pycollect._C; every public method is safe to call
// without the GIL.
//
// Failure: the first error of any operation marks the communicator failed,
// aborts every link (so neighbours notice at once and the failure travels around
// the ring), and fails every queued operation; any later call raises
// GroupFailedError naming that first error.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "collectives/context.h"
#include "comm/p2p.h"
#include "comm/work.h"
#include "common/fork.h"
#include "common/types.h"
#include "transport/link.h"
#include "transport/transport.h"

namespace pycollect {

struct CommOptions {
  double timeoutSec = 1800.0;    // per operation, from when it starts running
  Tunables tunables;
  size_t directMaxBytes = 16 * 1024;  // all-reduce uses the direct algorithm up to this
  int directMaxRanks = 8;             // ... and up to this many ranks
  int socketBuffer = 0;
  std::string secret;         // PYCOLLECT_SECRET: the handshake's challenge-response
  double linkTimeoutSec = 0;  // PYCOLLECT_LINK_TIMEOUT; 0: kDefaultLinkTimeoutSec
  TransportKind transport = TransportKind::kAuto;  // PYCOLLECT_TRANSPORT
  std::string hostTag;                             // PYCOLLECT_HOST_TAG
};

constexpr double kDefaultLinkTimeoutSec = 60.0;

class Communicator {
 public:
  Communicator(int rank, int size, CommOptions options);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }

  // Setup: bind a listener (returns the address to publish), then connect the mesh.
  std::pair<std::string, int> listen(const std::string& host);
  void connect(const std::vector<std::string>& hosts, const std::vector<int>& ports,
               uint64_t token);
  // Any thread: a running connect() gives up soon (another rank failed to connect).
  void cancelConnect() { transport_->cancelConnect(); }

  // Operations. Pointers must stay valid until the returned Work completes.
  // `algo`: kAuto chooses by size (options().directMax*), kRing or kDirect forces one.
  std::shared_ptr<Work> allReduce(void* data, size_t count, DType dtype, ReduceOp op, Algo algo);
  std::shared_ptr<Work> allGather(const void* in, void* out, size_t count, DType dtype);
  std::shared_ptr<Work> reduceScatter(const void* in, void* out, size_t count, DType dtype,
                                      ReduceOp op);
  std::shared_ptr<Work> broadcast(void* data, size_t count, DType dtype, int root);
  std::shared_ptr<Work> barrier();
  std::shared_ptr<Work> send(const void* data, size_t count, DType dtype, int peer, int tag);
  std::shared_ptr<Work> recv(void* data, size_t count, DType dtype, int peer, int tag);

  // Aborts running work, fails queued work, stops the worker and closes the links.
  void shutdown();
  bool failed();
  std::string failure();
  // What carries the link to each peer ("tcp" or "shm"), by group rank.
  std::map<int, std::string> linkKinds();
  // Calls per kind issued on this communicator, for tests and tools.
  std::map<std::string, uint64_t> counters();
  // Bytes of scratch memory the worker holds now. Large scratch (> kScratchKeepBytes)
  // is released after kScratchIdle without work.
  size_t scratchBytes() const;
  // Bytes this rank has posted for sending on its links (headers included), as of the
  // last finished operation: the communication volume the engine measured.
  uint64_t bytesSent() const;
  // Fails the group from any thread (e.g. on Ctrl-C in a wait): records `reason` as
  // the failure, and shuts the links down so the peers learn of it at once.
  void abort(const std::string& reason);
  static constexpr size_t kScratchKeepBytes = 8 << 20;
  static constexpr std::chrono::milliseconds kScratchIdle{1000};

  const CommOptions& options() const { return options_; }

 private:
  // A queued operation: a collective, run to completion on the worker, or a
  // point-to-point transfer, posted there and left in flight.
  struct Collective {
    WireHeader header;
    std::function<void(Context&)> run;
    std::shared_ptr<Work> work;
  };
  using Op = std::variant<Collective, std::unique_ptr<PendingP2P>>;
  static WireHeader& headerOf(Op& op);
  static std::shared_ptr<Work>& workOf(Op& op);

  // Numbers the op, gives it its Work and queues it; throws if the group failed.
  std::shared_ptr<Work> enqueue(Op op);
  std::shared_ptr<Work> enqueue(const WireHeader& header, std::function<void(Context&)> run) {
    return enqueue(Collective{header, std::move(run), nullptr});
  }
  std::shared_ptr<Work> enqueueP2P(bool isSend, void* data, size_t count, DType dtype, int peer,
                                   int tag);
  // Completes finished point-to-point transfers; throws on a mismatch or timeout.
  void reapP2P();
  // Idle with transfers in flight: wait for the links or a wake-up, then reap.
  // A mismatch found in an arrived header wins over a peer that has since left.
  void progressIdle();
  Clock::time_point deadlineFromNow() const;
  // The header of a call by this rank; refuses an (op, dtype) the kernels lack.
  WireHeader makeHeader(OpKind kind, DType dtype, ReduceOp op, size_t count, int root);
  void checkPeer(int peer, const char* what) const;
  void workerLoop();
  void failWith(const std::string& message);

  // Throws GroupFailedError in a process forked from the one that made this group.
  void checkNotForked() const;
  void countBytesSent();  // worker thread

  const fork::Owner owner_;  // first: a forked child must not touch the rest
  const int rank_;
  const int size_;
  CommOptions options_;
  std::unique_ptr<Transport> transport_;
  std::vector<Link*> links_;  // indexed by rank, nullptr at self; owned by transport_
  std::vector<char> scratch_;            // worker thread only
  std::atomic<size_t> scratchBytes_{0};  // its capacity, for any thread to read
  std::atomic<uint64_t> bytesSent_{0};    // refreshed by the worker after each op

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Op> queue_;
  bool stopping_ = false;
  bool connected_ = false;
  std::string failure_;
  std::thread worker_;
  bool idlePolling_ = false;    // (under mu_) the worker is in progressIdle: wake it
  std::deque<std::unique_ptr<PendingP2P>> p2p_;  // worker thread only

  uint64_t seq_ = 0;                 // collective calls issued (under mu_)
  std::vector<uint64_t> sendSeq_;    // p2p messages issued to each peer
  std::vector<uint64_t> recvSeq_;    // p2p messages expected from each peer
  std::map<std::string, uint64_t> calls_;
};

}  // namespace pycollect
