// A Communicator is one group's engine: its links (one per peer, each made when first
// used, and driven, by a Transport from makeTransport), a queue of operations, and one worker
// thread that runs them in the order they were issued; callers' threads may run
// or drive them too, one thread at a time (worker.cc: [Note: the driving rule]).
// Python holds it through pycollect._C; every public method is safe to call
// without the GIL.
//
// Failure: the first error of any operation marks the communicator failed,
// aborts every link (so neighbours notice at once and the failure travels around
// the ring), and fails every queued operation; any later call raises
// GroupFailedError naming that first error.
#pragma once

#include <array>
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
#include <vector>

#include "collectives/collectives.h"
#include "collectives/context.h"
#include "collectives/shared_arena.h"
#include "comm/p2p.h"
#include "comm/staging.h"
#include "comm/work.h"
#include "common/fork.h"
#include "common/types.h"
#include "device/host_device.h"
#include "trace/flight.h"
#include "trace/recorder.h"
#include "transport/link.h"
#include "transport/transport.h"

namespace pycollect {

struct AutoRow {
  size_t maxBytes;
  Algo algo;
};

// The algorithm `table` names for `bytes`, or `fallback` when the table is empty.
Algo lookupAuto(const std::vector<AutoRow>& table, size_t bytes, Algo fallback);

// From how many bytes kAuto runs each collective hierarchically (the group's cost
// model, pycollect/tuning/hierarchy.py, where it spans hosts); SIZE_MAX: never.
struct HierarchicalFrom {
  size_t allreduce = SIZE_MAX;  // bytes per rank
  size_t allgather = SIZE_MAX;  // bytes gathered
  size_t reduceScatter = SIZE_MAX;  // bytes of the input
  size_t broadcast = SIZE_MAX;
};

// CommOptions::sharedMaxBytes's default, and the per-call limits it stands for
// (Communicator::sharedFits): the all-reduce, all-gather and reduce-scatter take the arena
// at every size (its pipelined pieces, each read while still in a cache, beat the links'
// copies from 1 MiB and tie with them below, at 2 to 4 ranks); the broadcast up to
// kSharedBroadcastBytes (the chain's pipelined pieces win from 1 MiB at 2 ranks),
// kSharedLargeBytes on more than two ranks (the arena's receivers copy out at once, where
// the chain's wait hop by hop); the reduce up to kSharedSmallBytes, kSharedLargeBytes on
// more than two ranks (docs/algorithms.md, "Shared-memory collectives").
constexpr size_t kSharedPerCall = SIZE_MAX;
constexpr size_t kSharedSmallBytes = 16 << 10;
constexpr size_t kSharedLargeBytes = 1 << 20;
constexpr size_t kSharedBroadcastBytes = 256 << 10;

struct CommOptions {
  double timeoutSec = 1800.0;    // per operation, from when it starts running
  Tunables tunables;
  // kAuto runs a call through the group's shared arena (collectives/shared_arena.h) up to
  // this many bytes per rank, on a group whose ranks share one host; 0: never;
  // kSharedPerCall: each call's own limit (Communicator::sharedFits: what measured faster).
  size_t sharedMaxBytes = kSharedPerCall;  // PYCOLLECT_SHM_COLLECTIVE_BYTES
  size_t directMaxBytes = 16 * 1024;  // all-reduce uses the direct algorithm up to this
  int directMaxRanks = 8;             // ... and up to this many ranks
  // What kAuto means when set (pycollect.costmodel.auto_table, the same on every rank):
  // rows sorted by maxBytes, the first row with bytes <= maxBytes names the algorithm.
  // Empty: the directMax* thresholds above.
  std::vector<AutoRow> allreduceAuto;
  std::vector<AutoRow> allgatherAuto;
  HierarchicalFrom hierarchicalFrom;  // set with the group's hosts (setTopology)
  int socketBuffer = 0;
  std::string secret;         // PYCOLLECT_SECRET: the handshake's challenge-response
  double linkTimeoutSec = 0;  // PYCOLLECT_LINK_TIMEOUT; 0: kDefaultLinkTimeoutSec
  TransportKind transport = TransportKind::kAuto;  // PYCOLLECT_TRANSPORT
  std::string hostTag;                             // PYCOLLECT_HOST_TAG
  size_t shmSingleCopyBytes = kDefaultShmSingleCopyBytes;  // PYCOLLECT_SHM_SINGLE_COPY_BYTES
  bool allLinksAtStart = false;                    // PYCOLLECT_LINKS=all (transport.h)
  StagingOptions staging;                          // device buffers (PYCOLLECT_STAGING_BYTES)
  P2POptions p2p;                                  // point-to-point eager limit (PYCOLLECT_EAGER_BYTES)
  bool trace = false;                              // PYCOLLECT_TRACE: trace every call
  size_t flightEntries = 1024;                     // PYCOLLECT_FLIGHT_ENTRIES: the flight ring's size
};

// Where a call on device memory comes from: the CUDA device its buffers live on, and
// the caller's stream (its queued work runs before the call; 0: the default stream).
struct DeviceCall {
  int device = 0;
  uintptr_t stream = 0;
};

constexpr double kDefaultLinkTimeoutSec = 60.0;

// The name of the PyCapsule through which pycollect._C hands a std::shared_ptr<Communicator>*
// to the torch backend's module (bindings/register_communicator.cc, torch_backend/module.cc).
constexpr const char* kCommunicatorCapsule = "pycollect.Communicator";

// While an InlineScope with `on` lives on a thread, a collective that thread issues on a
// communicator with nothing queued or in flight runs right there (the caller waits for
// it anyway), instead of waking the worker and waiting to be woken: two thread
// hand-offs fewer per small call. Issue order is kept: anything queued runs first.
class InlineScope {
 public:
  explicit InlineScope(bool on);
  ~InlineScope();

 private:
  bool saved_;
};

class Communicator {
 public:
  Communicator(int rank, int size, CommOptions options);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }

  // Setup: bind a listener (returns the address to publish), then connect: the ring's
  // links now (or all of them, CommOptions::allLinksAtStart), the others when first used.
  std::pair<std::string, int> listen(const std::string& host);
  void connect(const std::vector<std::string>& hosts, const std::vector<int>& ports,
               uint64_t token);
  // Before connect(): the automatic choice's tables (CommOptions::allreduceAuto /
  // allgatherAuto), known only once the ranks have met in the store.
  void setAutoTables(std::vector<AutoRow> allreduce, std::vector<AutoRow> allgather);
  // Before connect(): the host of each rank (the group's topology, the same on every
  // rank), and from which sizes kAuto runs the hierarchical algorithms.
  void setTopology(std::vector<int> hostOf, HierarchicalFrom from);
  // Any thread: a running connect() gives up soon (another rank failed to connect).
  void cancelConnect() { transport_->cancelConnect(); }

  // Operations. Pointers must stay valid until the returned Work completes.
  // `algo`: kAuto chooses by size (options().allreduceAuto, the cost model's table, else
  // directMax*); kRing, kDirect, kHalvingDoubling or kTree forces one (another algorithm:
  // InvalidArgument).
  // `compress` (kBf16, kInt8; float32 SUM or AVG only): the wire format
  // (allreduce_compressed.cc); with it kAuto runs the ring on one host and the
  // hierarchical algorithm across hosts, compressing only between hosts.
  std::shared_ptr<Work> allReduce(void* data, size_t count, DType dtype, ReduceOp op, Algo algo,
                                  Compress compress = Compress::kNone);
  // `algo`: kAuto (options().allgatherAuto by the bytes each rank ends with, else the
  // ring), kRing or kBruck.
  std::shared_ptr<Work> allGather(const void* in, void* out, size_t count, DType dtype, Algo algo);
  // The list forms (collectives/list_forms.cc): the same calls on the wire as allGather's
  // and reduceScatter's, with one span per rank of in.count (out.count) elements here.
  std::shared_ptr<Work> allGatherList(Span in, std::vector<Span> outs, DType dtype, Algo algo);
  std::shared_ptr<Work> reduceScatterList(std::vector<Span> ins, Span out, DType dtype, ReduceOp op, Algo algo);
  // `algo` of reduceScatter and broadcast: kAuto (hierarchical from the group's
  // HierarchicalFrom on, else the ring), kRing or kHierarchical.
  std::shared_ptr<Work> reduceScatter(const void* in, void* out, size_t count, DType dtype,
                                      ReduceOp op, Algo algo = Algo::kAuto);
  std::shared_ptr<Work> broadcast(void* data, size_t count, DType dtype, int root, Algo algo = Algo::kAuto);
  // timeoutSec >= 0: this call's deadline instead of the group's (torch's barrier(timeout=)).
  std::shared_ptr<Work> barrier(double timeoutSec = -1);
  // Point-to-point (comm/p2p.h): messages matched by (source, tag), apart from the
  // collectives and in whatever order the program posts them; never queued behind a
  // collective. A send completes once its bytes left this process; a receive once a
  // message of at most `count` elements' bytes arrived (its RecvWork says from whom and
  // how many bytes; the dtypes need not agree). `peer`: a rank of the group; a recv's
  // kAnySource: the first message with `tag` from any rank.
  std::shared_ptr<Work> send(const void* data, size_t count, DType dtype, int peer, int tag);
  std::shared_ptr<RecvWork> recv(void* data, size_t count, DType dtype, int peer, int tag);
  // recv from kAnySource, the sender's rank also written to *source before the Work completes.
  std::shared_ptr<Work> recvAny(void* data, size_t count, DType dtype, int tag, int32_t* source);
  std::shared_ptr<Work> reduce(void* data, size_t count, DType dtype, ReduceOp op, int root);
  // Root: outs has one span per rank (sizes may differ); others pass none.
  std::shared_ptr<Work> gather(Span in, std::vector<Span> outs, DType dtype, int root);
  // Root: ins has one span per rank; others pass none.
  std::shared_ptr<Work> scatter(std::vector<Span> ins, Span out, DType dtype, int root);
  std::shared_ptr<Work> allToAll(std::vector<Span> ins, std::vector<Span> outs, DType dtype);
  std::shared_ptr<Work> allReduceCoalesced(std::vector<Span> tensors, DType dtype, ReduceOp op,
                                           Algo algo);
  // outs: size() * ins.size() spans, rank-major (outs[r * ins.size() + i] = rank r's ins[i]).
  // `algo` as allGather's, chosen by the packed bytes.
  std::shared_ptr<Work> allGatherCoalesced(std::vector<Span> ins, std::vector<Span> outs,
                                           DType dtype, Algo algo);

  // The same calls on device memory (CUDA tensors), staged through pinned host memory
  // (comm/staging.h). Raise before anything is sent if CUDA is missing or `call.device`
  // is not the group's device (the first staged call chooses it).
  std::shared_ptr<Work> allReduceStaged(void* data, size_t count, DType dtype, ReduceOp op,
                                        Algo algo, DeviceCall call);
  std::shared_ptr<Work> allGatherStaged(const void* in, void* out, size_t count, DType dtype,
                                        Algo algo, DeviceCall call);
  std::shared_ptr<Work> reduceScatterStaged(const void* in, void* out, size_t count, DType dtype,
                                            ReduceOp op, Algo algo, DeviceCall call);
  std::shared_ptr<Work> broadcastStaged(void* data, size_t count, DType dtype, int root, Algo algo,
                                        DeviceCall call);
  std::shared_ptr<Work> reduceStaged(void* data, size_t count, DType dtype, ReduceOp op, int root,
                                     DeviceCall call);
  // Tests: stage through a HostDevice (host memory plays device memory) instead of CUDA.
  // Must come before the first staged call.
  void useHostDevice(HostDeviceOptions options);
  // Whether useHostDevice was called: host memory takes the staged path (tests); and
  // whether waits on such calls order the host device's stream rather than block the host.
  bool stagesHostMemory();
  bool hostStreamWait();
  // The host device, once a staged call made it (nullptr otherwise): for test hooks.
  HostDevice* hostDevice();
  // Tests: the next staged call is numbered `seq` + 1 (StagedSync::restartAt); nothing in flight.
  void restartStagedSeq(uint32_t seq);
  // Pinned bytes the staging slots hold, and pieces staged so far.
  size_t stagingPinnedBytes();
  uint64_t stagedPieces() const { return stagedPieces_.load(); }

  // Waits for `work` (a Work of this group) up to `timeoutSec` (< 0: no limit), as
  // Work::wait does, but when the worker is only progressing posted sends and receives
  // the caller drives the links itself meanwhile (the worker stands aside): the wait
  // ends when the bytes arrive, not when another thread has noticed and woken it. A
  // caller under an InlineScope (one that waits however long the call takes) runs the
  // call itself when it is still first in the queue and nothing runs: as if it had been
  // issued blocking, without waking the worker for it and being woken in turn.
  bool waitDriving(const std::shared_ptr<Work>& work, double timeoutSec);

  // Aborts running work, fails queued work, stops the worker and closes the links.
  void shutdown();
  bool failed();
  std::string failure();
  // What carries the link to each peer ("tcp" or "shm"), by group rank: the links made
  // so far (a link is made when first used, mesh/transport.h).
  std::map<int, std::string> linkKinds();
  // Calls per kind issued on this communicator, for tests and tools.
  std::map<std::string, uint64_t> counters();
  // Bytes of scratch memory the worker holds now. Large scratch (> kScratchKeepBytes)
  // is released after kScratchIdle without work.
  size_t scratchBytes() const;
  // Bytes this rank has posted for sending on its links (headers included) or put into the
  // shared arena for its peers, as of the last finished operation: the communication
  // volume the engine measured.
  uint64_t bytesSent() const;
  // The flight recorder's entries (trace/flight.h), oldest first: the last calls issued.
  std::vector<flight::Record> flightRecord() const { return flight_.snapshot(); }
  // Fails the group from any thread (e.g. on Ctrl-C in a wait): records `reason` as
  // the failure, and shuts the links down so the peers learn of it at once.
  void abort(const std::string& reason);
  static constexpr size_t kScratchKeepBytes = 8 << 20;
  static constexpr std::chrono::milliseconds kScratchIdle{1000};

  const CommOptions& options() const { return options_; }

  // Tracing (trace/): calls issued while it is on record their events, which take
  // hands over (oldest first; `dropped`: events lost to the full buffer). Returns the
  // previous setting. Any thread.
  bool setTracing(bool on) { return tracing_.exchange(on); }
  bool tracing() const { return tracing_.load(); }
  std::vector<trace::Event> takeTrace(uint64_t* dropped) { return recorder_.take(dropped); }

  // ---- For the torch backend (csrc/torch_backend/) ------------------------------------------
  // An all-gather whose count differs by rank (torch's sparse all-reduce gathers every rank's
  // indices and values): one queued call that gathers the counts, then the elements
  // (comm/communicator_varied.cc). When its Work completes, `out` holds counts[r] elements of
  // rank r, packed in rank order in `data`.
  struct VariedGather {
    std::vector<uint64_t> counts;
    std::vector<char> data;
  };
  std::shared_ptr<Work> allGatherVaried(const void* in, size_t count, DType dtype, std::shared_ptr<VariedGather> out);
  // The group's timeout (CommOptions::timeoutSec until set) for the operations that start
  // from now on; any thread (torch's Backend::setTimeout).
  void setTimeout(double seconds) { timeoutSec_.store(seconds); }
  double timeout() const {
    const double set = timeoutSec_.load();
    return set > 0 ? set : options_.timeoutSec;
  }
  // ---- end of the torch backend's block ------------------------------------------------------

 private:
  // A queued collective, run to completion on the worker (or inline by its caller).
  struct Collective {
    WireHeader header;
    std::function<void(Context&)> run;
    std::shared_ptr<Work> work;
    double timeoutSec = -1;  // < 0: the group's timeout
    bool trace = false;      // tracing was on when it was issued
    // Makes its Work from its description (staged calls': StagedWork); unset: a plain Work.
    std::function<std::shared_ptr<Work>(std::string what)> makeWork;
  };
  // What the flight recorder keeps of a call being issued (numbered).
  static flight::Call flightCall(const WireHeader& h);

  // (under mu_) Throws unless a call may be issued: the group failed, was destroyed or is
  // not connected yet.
  void checkIssuable() const;
  // Numbers the collective, gives it its Work and queues it (or runs it inline, see
  // InlineScope); throws if the group failed.
  std::shared_ptr<Work> enqueue(Collective c);
  // Runs one collective on the thread that drives the links (the worker, or an inline
  // caller) and finishes its Work; on failure fails the group. Messages keep moving in its
  // waits (messages_); the hooks of those it completes run once it ended.
  void runCollective(Collective& c, Clock::time_point start = Clock::now());
  // Runs `ops` in order on this thread, which drives the group: a call issued by a completion
  // hook (last), after what was queued before it (worker.cc, [Note: calls from a completion]).
  void runHere(std::deque<Collective>& ops);
  void failRunning(const std::shared_ptr<Work>& work, const std::exception& e);
  std::shared_ptr<Work> enqueue(const WireHeader& header, std::function<void(Context&)> run) {
    return enqueue(Collective{header, std::move(run), nullptr, -1, false, {}});
  }
  // Gives a send or receive its Work and hands it to the point-to-point engine: posted here
  // if no other thread drives the links (a blocking one, with nothing queued, driven to its
  // end here), else left in submitted_ for the driving thread.
  std::shared_ptr<Work> issueP2P(std::unique_ptr<P2POp> op);
  // The driving thread: posts what other threads submitted, in their order.
  void takeSubmitted();
  // The driving thread: drives the links (point-to-point messages, and collectives queued
  // meanwhile when `runQueued`) until `work` completes or `limit` passes, spinning first
  // for tunables.spinUs; the program's signal handlers are asked between slices.
  void driveUntil(const std::shared_ptr<Work>& work, Clock::time_point limit, bool runQueued);
  // Runs the completion hooks of the messages completed during a collective (deferred).
  void runDeferredHooks();
  // Idle with messages in flight: wait for the links, a wake-up, the nearest message
  // deadline or `limit`, then progress them.
  void progressIdle(Clock::time_point limit);
  // One pass: take what was submitted, move bytes on every link, move the messages on.
  void progressP2P();
  // (under mu_, nobody driving) Nothing for a driver to do on the point-to-point side.
  bool p2pIdle() const { return submitted_.empty() && !p2p_.busy(); }
  Clock::time_point deadlineFromNow(double timeoutSec = -1, Clock::time_point now = Clock::now()) const;
  // The header of a call by this rank; refuses an (op, dtype) the kernels lack.
  WireHeader makeHeader(OpKind kind, DType dtype, ReduceOp op, size_t count, int root);
  void checkPeer(int peer, const char* what) const;
  void checkRoot(int root, const char* what) const;
  // A rooted call's list: one span per rank on the root (its own slot `own` elements
  // long), none elsewhere.
  void checkRootList(const std::vector<Span>& spans, size_t own, int root, const char* what) const;
  // The algorithm kAuto stands for, for an all-reduce of `bytes`.
  Algo chooseAlgo(Algo algo, size_t bytes) const;
  // Whether kAuto runs a `kind` call of `bytes` per rank through the shared arena: the group
  // is on one host, may share memory, and the call is small enough (CommOptions::sharedMaxBytes).
  bool sharedFits(OpKind kind, size_t bytes) const;
  // An all-gather's algorithm (checked) for kAuto or a forced one; `outBytes`: what each
  // rank ends with.
  Algo chooseAllgather(Algo algo, size_t outBytes) const;
  // An all-reduce's / all-gather's header, carrying the algorithm chosen on `bytes`
  // (what one run moves); the plain and the staged entries both start here.
  WireHeader allReduceHeader(size_t count, DType dtype, ReduceOp op, Algo algo, size_t bytes);
  WireHeader allGatherHeader(size_t count, DType dtype, Algo algo, size_t outBytes);
  // A reduce-scatter's / broadcast's, kAuto resolved on `inBytes` / `bytes`.
  WireHeader reduceScatterHeader(size_t count, DType dtype, ReduceOp op, Algo algo, size_t inBytes);
  WireHeader broadcastHeader(size_t count, DType dtype, int root, Algo algo, size_t bytes);
  // The scratch and stage memory the worker holds.
  size_t heldScratch() const { return scratch_.capacity() + stage_.capacity(); }
  void workerLoop();
  // Fails the group: keeps `message`, aborts every link, fails what is queued or posted.
  void failWith(const std::string& message);
  // Finishes every dropped op ("was not run: <reason>") and posted p2p ("did not complete:
  // <reason>") with a GroupFailedError; the one drain of failWith and shutdown (worker.cc).
  void failPending(std::deque<Collective> dropped, const std::string& reason);
  // The staging of device calls, made on first use for `device` (see *Staged).
  Staging& staging(int device);
  // Records the start event on the caller's stream and queues a staged call whose
  // piece k is `piece(k)` (runs on the worker; comm/communicator_staged.cc).
  std::shared_ptr<Work> enqueueStaged(const WireHeader& header, size_t pieces, size_t slotBytes,
                                      std::function<StagedPiece(size_t)> piece, DeviceCall call);
  // shutdown(): the staged copies in flight end, streams waiting on calls go on, and the
  // staging (its slots, streams and events) is freed; no call stages after it.
  void closeStaging();

  // Throws GroupFailedError in a process forked from the one that made this group.
  void checkNotForked() const;
  void countBytesSent();  // the driving thread

  const fork::Owner owner_;  // first: a forked child must not touch the rest
  const int rank_;
  const int size_;
  CommOptions options_;
  std::unique_ptr<Transport> transport_;
  std::mutex stagingMu_;                 // guards the four below
  std::unique_ptr<Staging> staging_;     // device calls; made on first use
  int stagingDevice_ = -1;
  std::unique_ptr<HostDeviceOptions> hostDevice_;  // set: stage through a HostDevice
  bool stagingClosed_ = false;           // shutdown released the staging: no new one
  // Whether hostDevice_ was set (it never goes back): every torch call asks, without the lock.
  std::atomic<bool> hostStaged_{false};
  std::atomic<uint64_t> stagedPieces_{0};
  std::vector<Link*> links_;     // the collectives', indexed by rank, nullptr at self; owned by transport_
  std::vector<Link*> p2pLinks_;  // the point-to-point messages', likewise
  std::vector<char> scratch_;            // the driving thread only (worker.cc: the driving rule)
  std::atomic<size_t> scratchBytes_{0};  // its capacity, for any thread to read
  std::atomic<uint64_t> bytesSent_{0};    // refreshed by the driving thread after each op

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Collective> queue_;
  bool stopping_ = false;
  bool connected_ = false;
  std::string failure_;
  std::thread worker_;
  bool idlePolling_ = false;    // (under mu_) the worker is in progressIdle: wake it
  bool driving_ = false;        // (under mu_) a thread runs an op or polls the links: the
                                // driving thread (worker.cc, [Note: the driving rule])
  int drivers_ = 0;             // (under mu_) callers waiting to drive the links (waitDriving)
  // (under mu_) Whether a thread that stops driving must wake the others: the worker for
  // calls queued, transfers posted, a failure, a shutdown or a scratch to give back; waiting
  // callers to drive. When nothing is left nobody is woken: on a busy host a wake-up costs
  // more than a small call (it takes a core from a rank that computes).
  bool othersNeedWaking() const;
  PointToPoint p2p_;  // the driving thread's (or under mu_ with nobody driving)
  std::vector<std::unique_ptr<P2POp>> submitted_;  // (under mu_) sends and receives for the driver to post
  std::atomic<bool> anySubmitted_{false};          // !submitted_.empty(), read without the lock
  // What a collective's waits poll besides its links: the messages (p2p_), by the driving thread.
  struct Messages final : Background {
    explicit Messages(Communicator& c) : comm(c) {}
    void poll() override;
    Communicator& comm;
    std::string failure;  // a message's failure found inside a collective, raised after it
  } messages_{*this};

  uint64_t seq_ = 0;                 // collective calls issued (under mu_)
  std::vector<uint64_t> sendSeq_;    // messages issued to each peer (under mu_)
  // Calls issued, by kind (counters() names them): an array, not a map, on every call's path.
  std::array<uint64_t, static_cast<size_t>(OpKind::kAllGatherVaried) + 1> calls_{};
  std::atomic<bool> tracing_{false};
  trace::Recorder recorder_;
  flight::Recorder flight_;
  Hierarchy hierarchy_;     // the group's hosts (setTopology; before: each rank alone)
  SharedArena arena_;       // the shared-memory collectives' segment (formed by the first)
  std::vector<char> stage_;  // the hierarchical algorithms' partial results (the driving thread)
  std::atomic<double> timeoutSec_{0};  // setTimeout's; 0: options_.timeoutSec
};

}  // namespace pycollect
