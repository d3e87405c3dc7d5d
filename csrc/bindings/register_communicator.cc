// Bindings of Communicator and Work. Buffers arrive as integer addresses; the
// Python layer validated them (dtype, size, contiguity, device) and keeps the
// owning objects alive until the Work completes.
#include <pybind11/stl.h>

#include <algorithm>

#include "bindings/blocking.h"
#include "bindings/register.h"
#include "comm/communicator.h"
#include "comm/staged_work.h"
#include "common/error.h"

namespace py = pybind11;

namespace pycollect {

namespace {

using AutoPairs = std::vector<std::pair<size_t, int>>;

// Checked: codes known, rows sorted by max_bytes, so the lookup's first match is the right one.
std::vector<AutoRow> autoRows(const AutoPairs& pairs) {
  std::vector<AutoRow> out;
  for (const auto& [maxBytes, code] : pairs) {
    if (!out.empty() && maxBytes <= out.back().maxBytes) {
      throw InvalidArgument("automatic-choice table: max_bytes must increase row by row, got " +
                            std::to_string(maxBytes) + " after " + std::to_string(out.back().maxBytes));
    }
    out.push_back({maxBytes, checkedAlgo(code)});
  }
  return out;
}

}  // namespace
namespace {

void* ptr(uintptr_t address) { return reinterpret_cast<void*>(address); }

// Buffers as (address, element count) pairs, one per tensor of a list argument.
using Buffers = std::vector<std::pair<uintptr_t, size_t>>;
std::vector<Span> spans(const Buffers& buffers) {
  std::vector<Span> out;
  out.reserve(buffers.size());
  for (const auto& b : buffers) out.push_back(Span{static_cast<char*>(ptr(b.first)), b.second});
  return out;
}

// A blocking call that ran to its end on this thread without error needs no Work in
// Python: None comes back instead (an object and two crossings fewer on a small call).
template <class W>
std::shared_ptr<W> unlessSettled(std::shared_ptr<W> work, bool blocking) {
  return blocking && work->isCompleted() && !work->failed() ? nullptr : work;
}

}  // namespace

void registerCommunicator(py::module_& m) {
  py::class_<Work, std::shared_ptr<Work>>(m, "Work")
      // Safe to release the GIL: Work only touches its own mutex and condition variable.
      .def("wait", &Work::wait, py::arg("timeout") = -1.0, py::call_guard<py::gil_scoped_release>())
      .def("is_completed", &Work::isCompleted)
      .def("failed", &Work::failed)
      .def_property_readonly("what", &Work::what);
  // A staged call's Work (comm/staged_work.h): returned as this class by the *_staged calls.
  py::class_<StagedWork, Work, std::shared_ptr<StagedWork>>(m, "StagedWork")
      .def("stream_wait", &StagedWork::streamWait, py::arg("stream"), py::call_guard<py::gil_scoped_release>())
      .def("device_done", &StagedWork::deviceDone, py::call_guard<py::gil_scoped_release>())
      .def("wait_device", &StagedWork::waitDevice, py::arg("timeout") = -1.0,
           py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("seq", &StagedWork::seq);
  // A receive's Work (comm/work.h): once completed, who sent the message and its size.
  py::class_<RecvWork, Work, std::shared_ptr<RecvWork>>(m, "RecvWork")
      .def_property_readonly("source", &RecvWork::source)
      .def_property_readonly("bytes", &RecvWork::bytes);

  py::class_<CommOptions>(m, "CommOptions")
      .def(py::init<>())
      .def_readwrite("timeout", &CommOptions::timeoutSec)
      .def_property(
          "segment_bytes", [](const CommOptions& o) { return o.tunables.segmentBytes; },
          [](CommOptions& o, size_t v) { o.tunables.segmentBytes = v; })
      .def_property(
          "inflight", [](const CommOptions& o) { return o.tunables.inflight; },
          [](CommOptions& o, int v) { o.tunables.inflight = v; })
      .def_property(
          "spin_us", [](const CommOptions& o) { return o.tunables.spinUs; },
          [](CommOptions& o, int v) { o.tunables.spinUs = v; })
      .def_readwrite("direct_max_bytes", &CommOptions::directMaxBytes)
      .def_readwrite("shm_collective_bytes", &CommOptions::sharedMaxBytes)
      .def_readwrite("direct_max_ranks", &CommOptions::directMaxRanks)
      // kAuto's tables as [(max_bytes, algo code), ...], sorted (pycollect.costmodel.auto_table).
      .def_readwrite("socket_buffer", &CommOptions::socketBuffer)
      .def_readwrite("link_timeout", &CommOptions::linkTimeoutSec)
      .def_property(
          "transport",
          [](const CommOptions& o) {
            switch (o.transport) {
              case TransportKind::kTcp: return "tcp";
              case TransportKind::kShm: return "shm";
              case TransportKind::kAuto: break;
            }
            return "auto";
          },
          [](CommOptions& o, const std::string& v) {
            if (v == "tcp") o.transport = TransportKind::kTcp;
            else if (v == "shm") o.transport = TransportKind::kShm;
            else if (v == "auto") o.transport = TransportKind::kAuto;
            else throw InvalidArgument("transport must be auto, tcp or shm, got '" + v + "'");
          })
      .def_readwrite("host_tag", &CommOptions::hostTag)
      .def_property(
          "shm_single_copy_bytes", [](const CommOptions& o) { return o.shmSingleCopyBytes; },
          [](CommOptions& o, size_t v) {
            if (v == 0) throw InvalidArgument("shm_single_copy_bytes must be > 0");
            o.shmSingleCopyBytes = v;
          })
      .def_readwrite("all_links_at_start", &CommOptions::allLinksAtStart)
      .def_property(
          "eager_bytes", [](const CommOptions& o) { return o.p2p.eagerBytes; },
          [](CommOptions& o, size_t v) {
            o.p2p.eagerBytes = v;
            // The credit holds a few of the largest eager messages (comm/p2p.h).
            o.p2p.creditBytes = std::max<size_t>(P2POptions().creditBytes, 4 * (v + sizeof(Frame)));
          })
      .def_readwrite("trace", &CommOptions::trace)
      .def_readwrite("flight_entries", &CommOptions::flightEntries)
      .def_property(
          "staging_bytes", [](const CommOptions& o) { return o.staging.pieceBytes; },
          [](CommOptions& o, size_t v) {
            if (v == 0) throw InvalidArgument("staging_bytes must be > 0");
            o.staging.pieceBytes = v;
          })
      .def_property(
          "staging_slots", [](const CommOptions& o) { return o.staging.slots; },
          [](CommOptions& o, int v) {
            if (v < 2) throw InvalidArgument("staging_slots must be >= 2, got " + std::to_string(v));
            o.staging.slots = v;
          })
      .def_property(
          "secret", [](const CommOptions& o) { return py::bytes(o.secret); },
          [](CommOptions& o, const py::bytes& v) { o.secret = std::string(v); });

  // Every method that may block or take the queue lock releases the GIL: the
  // communicator never calls back into Python, and the buffers are raw memory.
  using R = py::call_guard<py::gil_scoped_release>;
  // Held by a shared_ptr: the torch backend (pycollect._torch, another extension module
  // linked against the same engine library) shares the group through capsule().
  py::class_<Communicator, std::shared_ptr<Communicator>>(m, "Communicator")
      .def(py::init<int, int, CommOptions>(), py::arg("rank"), py::arg("size"), py::arg("options"))
      .def("capsule",
           [](const std::shared_ptr<Communicator>& c) {
             // A PyCapsule named kCommunicatorCapsule holding a std::shared_ptr<Communicator>*:
             // pybind11 types do not cross between modules built with different pybind11s.
             auto* held = new std::shared_ptr<Communicator>(c);
             return py::capsule(held, kCommunicatorCapsule,
                                [](void* p) { delete static_cast<std::shared_ptr<Communicator>*>(p); });
           })
      .def_property_readonly("rank", &Communicator::rank)
      .def_property_readonly("size", &Communicator::size)
      .def("listen", &Communicator::listen, py::arg("host"), R())
      .def(
          "set_auto_tables",
          [](Communicator& c, const AutoPairs& allreduce, const AutoPairs& allgather) {
            c.setAutoTables(autoRows(allreduce), autoRows(allgather));
          },
          py::arg("allreduce"), py::arg("allgather"))
      .def(
          "set_topology",
          [](Communicator& c, std::vector<int> hostOf, size_t allreduce, size_t allgather, size_t reduceScatter,
             size_t broadcast) {
            c.setTopology(std::move(hostOf), HierarchicalFrom{allreduce, allgather, reduceScatter, broadcast});
          },
          py::arg("host_of"), py::arg("allreduce_from"), py::arg("allgather_from"), py::arg("reduce_scatter_from"),
          py::arg("broadcast_from"))
      .def("connect", &Communicator::connect, py::arg("hosts"), py::arg("ports"), py::arg("token"), R())
      .def("cancel_connect", &Communicator::cancelConnect)
      // blocking=True: the caller waits for the result anyway, so the engine may run the
      // call on this thread when nothing is queued (InlineScope), with the GIL released; a
      // call that ended there without error returns None (unlessSettled).
      .def(
          "all_reduce",
          [](Communicator& c, uintptr_t data, size_t count, int dtype, int op, int algo, bool blocking,
             int compress) {
            Blocking scope(blocking);
            return unlessSettled(c.allReduce(ptr(data), count, checkedDType(dtype), checkedReduceOp(op),
                                             checkedAlgo(algo), checkedCompress(compress)),
                                 blocking);
          },
          py::arg("data"), py::arg("count"), py::arg("dtype"), py::arg("op"), py::arg("algo") = 0,
          py::arg("blocking") = false, py::arg("compress") = 0, R())
      .def(
          "all_gather",
          [](Communicator& c, uintptr_t in, uintptr_t out, size_t count, int dtype, int algo, bool blocking) {
            Blocking scope(blocking);
            return unlessSettled(c.allGather(ptr(in), ptr(out), count, checkedDType(dtype), checkedAlgo(algo)),
                                 blocking);
          },
          py::arg("inp"), py::arg("out"), py::arg("count"), py::arg("dtype"), py::arg("algo") = 0,
          py::arg("blocking") = false, R())
      .def(
          "reduce_scatter",
          [](Communicator& c, uintptr_t in, uintptr_t out, size_t count, int dtype, int op, int algo,
             bool blocking) {
            Blocking scope(blocking);
            return unlessSettled(c.reduceScatter(ptr(in), ptr(out), count, checkedDType(dtype),
                                                 checkedReduceOp(op), checkedAlgo(algo)),
                                 blocking);
          },
          py::arg("inp"), py::arg("out"), py::arg("count"), py::arg("dtype"), py::arg("op"), py::arg("algo") = 0,
          py::arg("blocking") = false, R())
      .def(
          "broadcast",
          [](Communicator& c, uintptr_t data, size_t count, int dtype, int root, int algo, bool blocking) {
            Blocking scope(blocking);
            return unlessSettled(c.broadcast(ptr(data), count, checkedDType(dtype), root, checkedAlgo(algo)), blocking);
          },
          py::arg("data"), py::arg("count"), py::arg("dtype"), py::arg("root"), py::arg("algo") = 0,
          py::arg("blocking") = false, R())
      .def(
          "barrier",
          [](Communicator& c, double timeout, bool blocking) {
            Blocking scope(blocking);
            return unlessSettled(c.barrier(timeout), blocking);
          },
          py::arg("timeout") = -1.0, py::arg("blocking") = false, R())
      .def(
          "send",
          [](Communicator& c, uintptr_t data, size_t count, int dtype, int peer, int tag, bool blocking) {
            Blocking scope(blocking);
            return unlessSettled(c.send(ptr(data), count, checkedDType(dtype), peer, tag), blocking);
          },
          py::arg("data"), py::arg("count"), py::arg("dtype"), py::arg("peer"), py::arg("tag"),
          py::arg("blocking") = false, R())
      .def(
          "recv",
          [](Communicator& c, uintptr_t data, size_t count, int dtype, int peer, int tag, bool blocking) {
            Blocking scope(blocking);
            // A receive from any source keeps its Work: the caller asks it who sent the message.
            return unlessSettled(c.recv(ptr(data), count, checkedDType(dtype), peer, tag),
                                 blocking && peer != kAnySource);
          },
          py::arg("data"), py::arg("count"), py::arg("dtype"), py::arg("peer"), py::arg("tag"),
          py::arg("blocking") = false, R())
      .def(
          "reduce",
          [](Communicator& c, uintptr_t data, size_t count, int dtype, int op, int root, bool blocking) {
            Blocking scope(blocking);
            return unlessSettled(c.reduce(ptr(data), count, checkedDType(dtype), checkedReduceOp(op), root), blocking);
          },
          py::arg("data"), py::arg("count"), py::arg("dtype"), py::arg("op"), py::arg("root"),
          py::arg("blocking") = false, R())
      .def(
          "gather",
          [](Communicator& c, uintptr_t in, size_t count, const Buffers& outs, int dtype, int root, bool blocking) {
            Blocking scope(blocking);
            return unlessSettled(
                c.gather(Span{static_cast<char*>(ptr(in)), count}, spans(outs), checkedDType(dtype), root), blocking);
          },
          py::arg("inp"), py::arg("count"), py::arg("outs"), py::arg("dtype"), py::arg("root"),
          py::arg("blocking") = false, R())
      .def(
          "scatter",
          [](Communicator& c, const Buffers& ins, uintptr_t out, size_t count, int dtype, int root, bool blocking) {
            Blocking scope(blocking);
            return unlessSettled(
                c.scatter(spans(ins), Span{static_cast<char*>(ptr(out)), count}, checkedDType(dtype), root), blocking);
          },
          py::arg("ins"), py::arg("out"), py::arg("count"), py::arg("dtype"), py::arg("root"),
          py::arg("blocking") = false, R())
      .def(
          "all_to_all",
          [](Communicator& c, const Buffers& ins, const Buffers& outs, int dtype, bool blocking) {
            Blocking scope(blocking);
            return unlessSettled(c.allToAll(spans(ins), spans(outs), checkedDType(dtype)), blocking);
          },
          py::arg("ins"), py::arg("outs"), py::arg("dtype"), py::arg("blocking") = false, R())
      .def(
          "all_reduce_coalesced",
          [](Communicator& c, const Buffers& tensors, int dtype, int op, int algo, bool blocking) {
            Blocking scope(blocking);
            return unlessSettled(
                c.allReduceCoalesced(spans(tensors), checkedDType(dtype), checkedReduceOp(op), checkedAlgo(algo)),
                blocking);
          },
          py::arg("tensors"), py::arg("dtype"), py::arg("op"), py::arg("algo") = 0, py::arg("blocking") = false, R())
      .def(
          "all_gather_coalesced",
          [](Communicator& c, const Buffers& ins, const Buffers& outs, int dtype, int algo, bool blocking) {
            Blocking scope(blocking);
            return unlessSettled(
                c.allGatherCoalesced(spans(ins), spans(outs), checkedDType(dtype), checkedAlgo(algo)), blocking);
          },
          py::arg("ins"), py::arg("outs"), py::arg("dtype"), py::arg("algo") = 0, py::arg("blocking") = false, R())
      // Device (CUDA) memory, staged through pinned host memory: `device` is the CUDA
      // ordinal, `stream` the caller's current stream (torch's cuda_stream).
      .def(
          "all_reduce_staged",
          [](Communicator& c, uintptr_t data, size_t count, int dtype, int op, int algo, int device,
             uintptr_t stream, bool blocking) {
            Blocking scope(blocking);
            return c.allReduceStaged(ptr(data), count, checkedDType(dtype), checkedReduceOp(op),
                                     checkedAlgo(algo), DeviceCall{device, stream});
          },
          py::arg("data"), py::arg("count"), py::arg("dtype"), py::arg("op"), py::arg("algo"),
          py::arg("device"), py::arg("stream"), py::arg("blocking") = false, R())
      .def(
          "all_gather_staged",
          [](Communicator& c, uintptr_t in, uintptr_t out, size_t count, int dtype, int algo, int device,
             uintptr_t stream, bool blocking) {
            Blocking scope(blocking);
            return c.allGatherStaged(ptr(in), ptr(out), count, checkedDType(dtype), checkedAlgo(algo),
                                     DeviceCall{device, stream});
          },
          py::arg("inp"), py::arg("out"), py::arg("count"), py::arg("dtype"), py::arg("algo"), py::arg("device"),
          py::arg("stream"), py::arg("blocking") = false, R())
      .def(
          "reduce_scatter_staged",
          [](Communicator& c, uintptr_t in, uintptr_t out, size_t count, int dtype, int op, int algo, int device,
             uintptr_t stream, bool blocking) {
            Blocking scope(blocking);
            return c.reduceScatterStaged(ptr(in), ptr(out), count, checkedDType(dtype), checkedReduceOp(op),
                                         checkedAlgo(algo), DeviceCall{device, stream});
          },
          py::arg("inp"), py::arg("out"), py::arg("count"), py::arg("dtype"), py::arg("op"), py::arg("algo"),
          py::arg("device"), py::arg("stream"), py::arg("blocking") = false, R())
      .def(
          "broadcast_staged",
          [](Communicator& c, uintptr_t data, size_t count, int dtype, int root, int algo, int device,
             uintptr_t stream, bool blocking) {
            Blocking scope(blocking);
            return c.broadcastStaged(ptr(data), count, checkedDType(dtype), root, checkedAlgo(algo),
                                     DeviceCall{device, stream});
          },
          py::arg("data"), py::arg("count"), py::arg("dtype"), py::arg("root"), py::arg("algo"), py::arg("device"),
          py::arg("stream"), py::arg("blocking") = false, R())
      .def(
          "reduce_staged",
          [](Communicator& c, uintptr_t data, size_t count, int dtype, int op, int root, int device,
             uintptr_t stream) {
            return c.reduceStaged(ptr(data), count, checkedDType(dtype), checkedReduceOp(op), root,
                                  DeviceCall{device, stream});
          },
          py::arg("data"), py::arg("count"), py::arg("dtype"), py::arg("op"), py::arg("root"),
          py::arg("device"), py::arg("stream"), R())
      // Tests: stage through the host device (CPU memory plays device memory).
      .def(
          "use_host_device",
          [](Communicator& c, int copyDelayUs, uint64_t failCopy, bool stickyErrors, bool failFlags,
             bool streamWait) {
            c.useHostDevice(HostDeviceOptions{copyDelayUs, failCopy, stickyErrors, failFlags, streamWait});
          },
          py::arg("copy_delay_us") = 0, py::arg("fail_copy") = 0, py::arg("sticky_errors") = false,
          py::arg("fail_flags") = false, py::arg("stream_wait") = false)
      .def(
          "host_device_fill",
          [](Communicator& c, uintptr_t data, size_t bytes, int value, int delayUs) {
            HostDevice* d = c.hostDevice();
            if (d == nullptr) throw InvalidArgument("host_device_fill: no host device staged a call yet");
            d->fill(ptr(data), bytes, value, delayUs, 0);
          },
          py::arg("data"), py::arg("bytes"), py::arg("value"), py::arg("delay_us"))
      .def(
          "host_device_snapshot",  // tests: a memcpy queued on the caller's stream (0)
          [](Communicator& c, uintptr_t dst, uintptr_t src, size_t bytes) {
            HostDevice* d = c.hostDevice();
            if (d == nullptr) throw InvalidArgument("host_device_snapshot: no host device staged a call yet");
            d->snapshot(ptr(dst), ptr(src), bytes, 0);
          },
          py::arg("dst"), py::arg("src"), py::arg("bytes"))
      .def(
          "host_device_synchronize",  // tests: the host waits for the caller's stream (0)
          [](Communicator& c) {
            HostDevice* d = c.hostDevice();
            if (d == nullptr) throw InvalidArgument("host_device_synchronize: no host device staged a call yet");
            d->synchronize(0);
          },
          py::call_guard<py::gil_scoped_release>())
      .def("restart_staged_seq", &Communicator::restartStagedSeq, py::arg("seq"))  // tests
      .def("staging_pinned_bytes", &Communicator::stagingPinnedBytes)
      .def("staged_pieces", &Communicator::stagedPieces)
      .def("shutdown", &Communicator::shutdown, R())
      .def("failed", &Communicator::failed)
      .def("failure", &Communicator::failure)
      .def("counters", &Communicator::counters)
      .def("link_kinds", &Communicator::linkKinds)
      .def("scratch_bytes", &Communicator::scratchBytes)
      .def("bytes_sent", &Communicator::bytesSent)
      .def(
          "wait_driving",
          [](Communicator& c, const std::shared_ptr<Work>& work, double timeout, bool runQueued) {
            Blocking scope(runQueued);  // the caller waits however long: it may run the call
            return c.waitDriving(work, timeout);
          },
          py::arg("work"), py::arg("timeout") = -1.0, py::arg("run_queued") = false, R())
      .def("abort", &Communicator::abort, py::arg("reason"), R())
      .def("set_tracing", &Communicator::setTracing, py::arg("on"))
      .def("tracing", &Communicator::tracing)
      // (events, dropped): each event a tuple (ns, type, op, seq, phase, step, chunk,
      // segment, peer, bytes), oldest first; the buffer is emptied.
      .def("take_trace", [](Communicator& c) {
        uint64_t dropped = 0;
        std::vector<trace::Event> events;
        {
          py::gil_scoped_release release;  // only the recorder's mutex is taken
          events = c.takeTrace(&dropped);
        }
        py::list out(events.size());
        for (size_t i = 0; i < events.size(); ++i) {
          const trace::Event& e = events[i];
          out[i] = py::make_tuple(e.ns, trace::eventTypeName(e.type), opKindName(static_cast<OpKind>(e.kind)),
                                  e.seq, e.unit.phase, e.unit.step, e.unit.chunk, e.unit.segment, e.peer,
                                  e.bytes);
        }
        return py::make_tuple(out, dropped);
      })
      // The flight recorder's entries, oldest first, each a dict (pycollect/flight.py).
      .def("flight_record", [](Communicator& c) {
        std::vector<flight::Record> records;
        {
          py::gil_scoped_release release;  // only the recorder's mutex is taken
          records = c.flightRecord();
        }
        py::list out(records.size());
        for (size_t i = 0; i < records.size(); ++i) {
          const flight::Record& r = records[i];
          py::dict d;
          d["id"] = r.id;
          d["seq"] = r.call.seq;
          d["op"] = opKindName(static_cast<OpKind>(r.call.kind));
          d["dtype"] = dtypeName(static_cast<DType>(r.call.dtype));
          d["algo"] = algoName(static_cast<Algo>(r.call.algo));
          d["root"] = r.call.root;
          d["count"] = r.call.count;
          d["peer"] = r.call.peer;
          d["send"] = r.call.send;
          d["state"] = flight::stateName(r.state);
          d["phase"] = r.phase;
          d["step"] = r.step;
          d["steps"] = r.steps;
          d["waiting_on"] = r.waitingOn;
          d["issued_us"] = r.issuedUs;
          d["started_us"] = r.startedUs;
          d["ended_us"] = r.endedUs;
          out[i] = d;
        }
        return out;
      });
}

}  // namespace pycollect
