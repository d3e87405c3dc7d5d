// Communicator calls on device memory: how each collective is cut into staged pieces.
// The pipeline itself (copies, slots, events, waits) is comm/staging.cc.
//
// Element-wise calls (all-reduce, broadcast, reduce) cut the buffer into runs of at
// most `per` elements; the slot holds the run. All-gather and reduce-scatter cut each
// rank's chunk the same way, so piece k carries elements [a, a+len) of every chunk:
//   all-gather:     slot = n runs of len (rank q's run at q*len); our input run is
//                   copied into run `rank`, the ring fills the others in place, and each
//                   run q goes back to out[q*count + a ..].
//   reduce-scatter: slot = n input runs (run q from in[q*count + a ..]) then one output
//                   run; the ring reduces into the output run, which goes to out[a ..].
// Example, all-gather of 5 elements per rank on 2 ranks with per = 4: len = 2, so 3
// pieces (2, 2, 1 elements of each chunk); piece 1 on rank 0 copies in[2..4) into run
// 0, gathers rank 1's in[2..4) into run 1, and writes out[2..4) and out[7..9).
#include <algorithm>

#include "collectives/collectives.h"
#include "comm/communicator.h"
#include "comm/staged_work.h"
#include "common/error.h"
#include "device/cuda_device.h"

namespace pycollect {
namespace {

// An event made for one call and destroyed with it (whether it ran or was dropped).
struct OwnedEvent {
  OwnedEvent(Device& d, EventHandle e) : device(d), handle(e) {}
  ~OwnedEvent() {
    try {
      device.destroyEvent(handle);
    } catch (...) {
    }
  }
  Device& device;
  EventHandle handle;
};

// How a call of `count` elements per rank is cut: `per` elements per piece.
struct Cut {
  Cut(size_t count, size_t per) : count(count), per(std::max<size_t>(1, per)) {}
  size_t pieces() const { return std::max<size_t>(1, (count + per - 1) / per); }
  size_t begin(size_t k) const { return std::min(count, k * per); }
  size_t length(size_t k) const { return std::min(count, (k + 1) * per) - begin(k); }
  size_t count, per;
};

// The largest slot any call of a group of `n` ranks can need, so the slots are made once
// at that size (comm/staging.cc, "Slots"). A piece carries at most pieceBytes, except
// that it holds at least one element of each of its runs: n + 1 for reduce-scatter.
size_t largestSlot(size_t pieceBytes, size_t n) {
  size_t widest = 0;
  for (int t = 0; t < kNumDTypes; ++t) widest = std::max(widest, dtypeSize(static_cast<DType>(t)));
  return std::max(pieceBytes, (n + 1) * widest);
}

}  // namespace

void Communicator::useHostDevice(HostDeviceOptions options) {
  std::lock_guard<std::mutex> lock(stagingMu_);
  if (staging_ != nullptr) throw InvalidArgument("use_host_device: the group already staged a call");
  hostDevice_ = std::make_unique<HostDeviceOptions>(options);
  hostStaged_.store(true, std::memory_order_release);
}

bool Communicator::stagesHostMemory() { return hostStaged_.load(std::memory_order_acquire); }

bool Communicator::hostStreamWait() {
  std::lock_guard<std::mutex> lock(stagingMu_);
  return hostDevice_ != nullptr && hostDevice_->streamWait;
}

HostDevice* Communicator::hostDevice() {
  std::lock_guard<std::mutex> lock(stagingMu_);
  if (staging_ == nullptr || hostDevice_ == nullptr) return nullptr;
  return static_cast<HostDevice*>(&staging_->device());
}

void Communicator::restartStagedSeq(uint32_t seq) {
  std::lock_guard<std::mutex> lock(stagingMu_);
  if (staging_ == nullptr) throw InvalidArgument("restart_staged_seq: the group has not staged a call yet");
  staging_->sync()->restartAt(seq);
}

void Communicator::closeStaging() {
  // The group is over: its slots, streams and events go now, not when Python lets go of
  // the communicator (a Work of ours keeps only the device and the flag words).
  std::lock_guard<std::mutex> lock(stagingMu_);
  stagingClosed_ = true;
  staging_.reset();
}

size_t Communicator::stagingPinnedBytes() {
  std::lock_guard<std::mutex> lock(stagingMu_);
  return staging_ == nullptr ? 0 : staging_->pinnedBytes();
}

Staging& Communicator::staging(int device) {
  std::lock_guard<std::mutex> lock(stagingMu_);
  if (stagingClosed_) throw GroupFailedError("the process group was destroyed");
  if (staging_ == nullptr) {
    std::unique_ptr<Device> d;
    if (hostDevice_ != nullptr) {
      d = std::make_unique<HostDevice>(*hostDevice_);
    } else {
      d = std::make_unique<CudaDevice>(device);  // raises DeviceError without CUDA
    }
    StagingOptions so = options_.staging;
    so.slotBytes = largestSlot(so.pieceBytes, size_);
    staging_ = std::make_unique<Staging>(std::move(d), so);
    stagingDevice_ = device;
  } else if (device != stagingDevice_) {
    throw InvalidArgument("a tensor on cuda:" + std::to_string(device) + " was passed to a group whose CUDA device is cuda:" +
                          std::to_string(stagingDevice_) +
                          " (a group stages through the device of its first CUDA call)");
  }
  return *staging_;
}

std::shared_ptr<Work> Communicator::enqueueStaged(const WireHeader& header, size_t pieces,
                                                  size_t slotBytes,
                                                  std::function<StagedPiece(size_t)> piece,
                                                  DeviceCall dc) {
  checkNotForked();
  Staging& st = staging(dc.device);
  Device& dev = st.device();
  // Recorded now, on the caller's stream: the copies start after the work queued there.
  auto start = std::make_shared<OwnedEvent>(dev, dev.createEvent());
  dev.record(start->handle, dc.stream);
  // Its number and `done` event, which wait() makes the caller's stream wait on.
  auto ticket = std::make_shared<StagedTicket>(st.sync());
  Collective op{header, nullptr, nullptr};
  op.makeWork = [ticket](std::string what) { return std::make_shared<StagedWork>(std::move(what), ticket); };
  op.run = [this, &st, start, ticket, pieces, slotBytes, piece](Context& c) {
    ticket->ran.store(true);
    StagedCall call;
    call.pieces = pieces;
    call.slotBytes = slotBytes;
    call.piece = piece;
    call.start = start->handle;
    call.done = ticket->done;
    call.seq = ticket->seq;
    call.deadline = deadlineFromNow();
    call.what = std::string(opKindName(static_cast<OpKind>(c.call.kind))) + " (call #" +
                std::to_string(c.call.seq) + ") on rank " + std::to_string(rank_);
    call.stopReason = [this]() -> std::string {
      std::lock_guard<std::mutex> lock(mu_);
      if (!failure_.empty()) return failure_;
      return stopping_ ? "the process group is being destroyed" : "";
    };
    const WireHeader base = c.call;
    const Clock::time_point deadline = call.deadline;
    call.onWire = [this, base, deadline](size_t count, const std::function<void(Context&)>& body) {
      WireHeader h = base;
      h.count = count;  // each piece is a collective of its own size: cuts must agree
      Context pc(rank_, size_, *transport_, links_, &messages_, h, deadline, Clock::now(), options_.tunables, scratch_);
      pc.setHierarchy(&hierarchy_, &stage_);
      body(pc);
      pc.drainSends();
      ++stagedPieces_;
    };
    st.run(call);
  };
  // Never inline, even for a blocking caller: its wait() may make its stream wait and
  // return while the call is still on the wire (comm/staged_work.h), so the worker runs it.
  InlineScope queued(false);
  return enqueue(std::move(op));
}

std::shared_ptr<Work> Communicator::allReduceStaged(void* data, size_t count, DType dtype,
                                                    ReduceOp op, Algo algo, DeviceCall dc) {
  const size_t es = dtypeSize(dtype);
  Cut cut(count, options_.staging.pieceBytes / es);
  // The algorithm of the pieces, chosen on one piece's size (what each run moves).
  const WireHeader h = allReduceHeader(count, dtype, op, algo, cut.length(0) * es);
  const Algo chosen = static_cast<Algo>(h.algo);
  char* base = static_cast<char*>(data);
  auto piece = [=](size_t k) {
    StagedPiece p;
    p.count = cut.length(k);
    const size_t bytes = p.count * es;
    p.in = {{0, base + cut.begin(k) * es, bytes}};
    p.out = p.in;
    const size_t len = p.count;
    p.run = [=](Context& c, char* slot) { allreduceWith(chosen, c, slot, len, dtype, op); };
    return p;
  };
  return enqueueStaged(h, cut.pieces(), cut.per * es, piece, dc);
}

std::shared_ptr<Work> Communicator::broadcastStaged(void* data, size_t count, DType dtype, int root,
                                                    Algo algo, DeviceCall dc) {
  const size_t es = dtypeSize(dtype);
  Cut cut(count, options_.staging.pieceBytes / es);
  const WireHeader h = broadcastHeader(count, dtype, root, algo, cut.length(0) * es);
  const Algo chosen = static_cast<Algo>(h.algo);
  char* base = static_cast<char*>(data);
  const bool isRoot = rank_ == root;
  auto piece = [=](size_t k) {
    StagedPiece p;
    p.count = cut.length(k);
    const size_t bytes = p.count * es;
    StageCopy copy{0, base + cut.begin(k) * es, bytes};
    if (isRoot) p.in = {copy};  // the root only sends, the others only receive
    else p.out = {copy};
    p.run = [=](Context& c, char* slot) { broadcastWith(chosen, c, slot, bytes, root); };
    return p;
  };
  return enqueueStaged(h, cut.pieces(), cut.per * es, piece, dc);
}

std::shared_ptr<Work> Communicator::reduceStaged(void* data, size_t count, DType dtype, ReduceOp op,
                                                 int root, DeviceCall dc) {
  checkRoot(root, "reduce");
  const size_t es = dtypeSize(dtype);
  Cut cut(count, options_.staging.pieceBytes / es);
  WireHeader h = makeHeader(OpKind::kReduce, dtype, op, count, root);
  char* base = static_cast<char*>(data);
  const bool isRoot = rank_ == root;
  auto piece = [=](size_t k) {
    StagedPiece p;
    p.count = cut.length(k);
    const size_t len = p.count;
    p.in = {{0, base + cut.begin(k) * es, len * es}};
    if (isRoot) p.out = p.in;  // only the root's buffer changes
    p.run = [=](Context& c, char* slot) { reduceChain(c, slot, len, dtype, op, root); };
    return p;
  };
  return enqueueStaged(h, cut.pieces(), cut.per * es, piece, dc);
}

std::shared_ptr<Work> Communicator::allGatherStaged(const void* in, void* out, size_t count, DType dtype,
                                                    Algo algo, DeviceCall dc) {
  const size_t es = dtypeSize(dtype);
  const size_t n = size_;
  Cut cut(count, options_.staging.pieceBytes / es / n);
  // The algorithm of the pieces, chosen on what one piece gathers (as all-reduce's).
  const WireHeader h = allGatherHeader(count, dtype, algo, cut.length(0) * es * n);
  const Algo chosen = static_cast<Algo>(h.algo);
  const char* src = static_cast<const char*>(in);
  char* dst = static_cast<char*>(out);
  const size_t r = rank_;
  auto piece = [=](size_t k) {
    StagedPiece p;
    p.count = cut.length(k);
    const size_t len = p.count, a = cut.begin(k), run = len * es;
    p.in = {{r * run, const_cast<char*>(src) + a * es, run}};
    for (size_t q = 0; q < n; ++q) p.out.push_back({q * run, dst + (q * count + a) * es, run});
    p.run = [=](Context& c, char* slot) { allgatherWith(chosen, c, slot + r * run, slot, len, dtype); };
    return p;
  };
  return enqueueStaged(h, cut.pieces(), n * cut.per * es, piece, dc);
}

std::shared_ptr<Work> Communicator::reduceScatterStaged(const void* in, void* out, size_t count,
                                                        DType dtype, ReduceOp op, Algo algo, DeviceCall dc) {
  const size_t es = dtypeSize(dtype);
  const size_t n = size_;
  Cut cut(count, options_.staging.pieceBytes / es / (n + 1));
  const WireHeader h = reduceScatterHeader(count, dtype, op, algo, cut.length(0) * es * n);
  const Algo chosen = static_cast<Algo>(h.algo);
  const char* src = static_cast<const char*>(in);
  char* dst = static_cast<char*>(out);
  auto piece = [=](size_t k) {
    StagedPiece p;
    p.count = cut.length(k);
    const size_t len = p.count, a = cut.begin(k), run = len * es;
    for (size_t q = 0; q < n; ++q) p.in.push_back({q * run, const_cast<char*>(src) + (q * count + a) * es, run});
    p.out = {{n * run, dst + a * es, run}};
    p.run = [=](Context& c, char* slot) { reduceScatterWith(chosen, c, slot, slot + n * run, len, dtype, op); };
    return p;
  };
  return enqueueStaged(h, cut.pieces(), (n + 1) * cut.per * es, piece, dc);
}

}  // namespace pycollect
