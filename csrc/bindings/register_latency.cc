// pycollect._C.engine_latency: an OSU-style latency loop run entirely in C++ on a formed
// group's Communicator, so that the engine's own floor is measured with no Python per call
// (pycollect/benchmark/engine.py allocates the buffers and reads the times).
//
// Each call is issued as a blocking Python call is (api.py -> group.run_blocking): under an
// InlineScope, so with nothing queued it runs on this thread; a Work not done on return is
// waited on with waitDriving, the caller driving the links. Each call is timed on its own,
// after the previous one returned: steady_clock's two reads add some 20-40 ns to each.
#include <pybind11/stl.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "bindings/register.h"
#include "comm/communicator.h"
#include "common/error.h"
#include "common/interrupt.h"

namespace py = pybind11;

namespace pycollect {

namespace {

enum class LoopOp { kAllReduce, kBroadcast, kReduce, kBarrier, kPingPong, kAllGather, kReduceScatter, kGather, kScatter, kAllToAll };

LoopOp loopOp(const std::string& name) {
  if (name == "all_reduce") return LoopOp::kAllReduce;
  if (name == "broadcast") return LoopOp::kBroadcast;
  if (name == "reduce") return LoopOp::kReduce;
  if (name == "barrier") return LoopOp::kBarrier;
  if (name == "ping_pong") return LoopOp::kPingPong;
  if (name == "all_gather") return LoopOp::kAllGather;
  if (name == "reduce_scatter") return LoopOp::kReduceScatter;
  if (name == "gather") return LoopOp::kGather;
  if (name == "scatter") return LoopOp::kScatter;
  if (name == "all_to_all") return LoopOp::kAllToAll;
  throw InvalidArgument("engine_latency: unknown op '" + name +
                        "' (all_reduce, broadcast, reduce, barrier, ping_pong, all_gather, reduce_scatter, gather, scatter, "
                        "all_to_all)");
}

constexpr int kPingPongTag = 0;  // as pycollect.send/recv's default

// What Python's blocking call does after the issue: a call that ran inline and succeeded is
// done; any other is waited on, its error rethrown.
void settle(Communicator& c, const std::shared_ptr<Work>& w) {
  if (!w->isCompleted() || w->failed()) c.waitDriving(w, -1);
}

// Rank r's span of `count` floats in `all` (size() of them), each call anew as a caller's.
std::vector<Span> partsOf(const Communicator& c, float* all, size_t count) {
  std::vector<Span> parts(c.size());
  for (int r = 0; r < c.size(); ++r) parts[r] = Span{reinterpret_cast<char*>(all + r * count), count};
  return parts;
}

// One call of `op` on float32 buffers, SUM for the reductions, root 0. `count`: the
// elements of `data` (all_reduce, broadcast, reduce, ping_pong), each rank's input (all_gather and
// gather, out: size() * count), each rank's output (reduce_scatter and scatter, data:
// size() * count) or each part (all_to_all: data and out of size() * count).
void callOnce(Communicator& c, LoopOp op, float* data, float* out, size_t count) {
  const bool root = c.rank() == 0;
  switch (op) {
    case LoopOp::kAllToAll:
      return settle(c, c.allToAll(partsOf(c, data, count), partsOf(c, out, count), DType::kFloat32));
    case LoopOp::kGather:
      return settle(c, c.gather(Span{reinterpret_cast<char*>(data), count},
                                root ? partsOf(c, out, count) : std::vector<Span>{}, DType::kFloat32, 0));
    case LoopOp::kScatter:
      return settle(c, c.scatter(root ? partsOf(c, data, count) : std::vector<Span>{},
                                 Span{reinterpret_cast<char*>(out), count}, DType::kFloat32, 0));
    case LoopOp::kAllReduce:
      return settle(c, c.allReduce(data, count, DType::kFloat32, ReduceOp::kSum, Algo::kAuto));
    case LoopOp::kBroadcast:
      return settle(c, c.broadcast(data, count, DType::kFloat32, 0));
    case LoopOp::kReduce:
      return settle(c, c.reduce(data, count, DType::kFloat32, ReduceOp::kSum, 0));
    case LoopOp::kBarrier:
      return settle(c, c.barrier());
    case LoopOp::kAllGather:
      return settle(c, c.allGather(data, out, count, DType::kFloat32, Algo::kAuto));
    case LoopOp::kReduceScatter:
      return settle(c, c.reduceScatter(data, out, count, DType::kFloat32, ReduceOp::kSum));
    case LoopOp::kPingPong:  // one round trip between ranks 0 and 1; the others idle
      if (c.rank() == 0) {
        settle(c, c.send(data, count, DType::kFloat32, 1, kPingPongTag));
        settle(c, c.recv(data, count, DType::kFloat32, 1, kPingPongTag));
      } else if (c.rank() == 1) {
        settle(c, c.recv(data, count, DType::kFloat32, 0, kPingPongTag));
        settle(c, c.send(data, count, DType::kFloat32, 0, kPingPongTag));
      }
      return;
  }
}

// `warmup` untimed calls, a barrier, then `iters` calls each timed alone: microseconds per call.
std::vector<double> latencyLoop(Communicator& c, LoopOp op, float* data, float* out, size_t count, int iters,
                                int warmup) {
  if (op == LoopOp::kPingPong && c.size() < 2) throw InvalidArgument("engine_latency: ping_pong needs 2 ranks");
  if (iters < 0 || warmup < 0) throw InvalidArgument("engine_latency: iters and warmup must be >= 0");
  for (int i = 0; i < warmup; ++i) callOnce(c, op, data, out, count);
  settle(c, c.barrier());
  std::vector<double> times(static_cast<size_t>(iters));
  for (auto& t : times) {
    const auto t0 = std::chrono::steady_clock::now();
    callOnce(c, op, data, out, count);
    t = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  }
  return times;
}

}  // namespace

void registerLatency(py::module_& m) {
  m.def(
      "engine_latency",
      [](Communicator& c, const std::string& op, uintptr_t data, uintptr_t out, size_t count, int iters,
         int warmup) {
        const LoopOp which = loopOp(op);
        // The whole loop runs here: InlineScope as a blocking Python call has, and Ctrl-C
        // checks every 50 ms of a long wait (the GIL is taken only for those).
        InlineScope inlined(true);
        interrupt::Scope checks(pythonSignalPending);
        return latencyLoop(c, which, reinterpret_cast<float*>(data), reinterpret_cast<float*>(out), count, iters,
                           warmup);
      },
      py::arg("comm"), py::arg("op"), py::arg("data"), py::arg("out"), py::arg("count"), py::arg("iters"),
      py::arg("warmup") = 0,
      // Safe without the GIL: raw buffers the caller keeps alive, and a Communicator whose
      // methods never call into Python.
      py::call_guard<py::gil_scoped_release>());
}

}  // namespace pycollect
