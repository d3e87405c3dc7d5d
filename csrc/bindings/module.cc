// pycollect._C: the only door into the C++ engine. One register_* function per area.
#include "bindings/register.h"
#include "collectives/collectives.h"
#include "collectives/context.h"
#include "comm/communicator.h"
#include "collectives/rail_pipeline.h"
#include "collectives/shared_arena.h"
#include "common/types.h"
#include "common/error.h"
#include "device/device.h"
#include "device/host_device.h"
#include "common/memory.h"
#include "common/hmac.h"
#include "reduce/reduce.h"
#include "trace/hooks.h"

namespace py = pybind11;

namespace pycollect {

namespace {

// The exception a signal handler raised during a call on this thread (see Blocking).
struct StashedError {
  PyObject* type = nullptr;
  PyObject* value = nullptr;
  PyObject* traceback = nullptr;
};
thread_local StashedError tStashed;

// The Python types of the engine's errors (registerErrors makes them).
struct ErrorTypes {
  py::handle base, invalid, timeout, lost, mismatch, groupFailed, device;
};
ErrorTypes errorTypes;

}  // namespace

bool pythonSignalPending() {
  py::gil_scoped_acquire gil;
  if (PyErr_CheckSignals() == 0) return false;
  if (tStashed.type == nullptr) {
    PyErr_Fetch(&tStashed.type, &tStashed.value, &tStashed.traceback);
  } else {
    PyErr_Clear();  // one is kept already
  }
  return true;
}

void registerErrors(py::module_& m) {
  // Python-side hierarchy: PyCollectError(RuntimeError) and its subclasses; the
  // timeout also derives from TimeoutError so `except TimeoutError` catches it.
  static py::exception<Error> base(m, "PyCollectError", PyExc_RuntimeError);
  static py::exception<InvalidArgument> invalid(m, "InvalidArgumentError", PyExc_ValueError);
  py::object timeoutBases = py::make_tuple(base, py::handle(PyExc_TimeoutError));
  static py::exception<TimeoutError> timeout(m, "CollectiveTimeoutError", timeoutBases.ptr());
  static py::exception<PeerLostError> lost(m, "PeerLostError", base.ptr());
  static py::exception<MismatchError> mismatch(m, "MismatchError", base.ptr());
  static py::exception<GroupFailedError> groupFailed(m, "GroupFailedError", base.ptr());
  static py::exception<DeviceError> device(m, "DeviceError", base.ptr());
  errorTypes = ErrorTypes{base, invalid, timeout, lost, mismatch, groupFailed, device};
  py::register_exception_translator(translateEngineError);
}

void translateEngineError(std::exception_ptr p) {
  const ErrorTypes& t = errorTypes;
  try {
    if (p) std::rethrow_exception(p);
  } catch (const Interrupted& e) {
    // The handler's own exception (KeyboardInterrupt for Ctrl-C), raised where it belongs.
    if (tStashed.type != nullptr) {
      PyErr_Restore(tStashed.type, tStashed.value, tStashed.traceback);
      tStashed = StashedError();
    } else {
      PyErr_SetString(PyExc_KeyboardInterrupt, e.what());
    }
  } catch (const InvalidArgument& e) {
    py::set_error(t.invalid, e.what());
  } catch (const TimeoutError& e) {
    py::set_error(t.timeout, e.what());
  } catch (const PeerLostError& e) {
    py::set_error(t.lost, e.what());
  } catch (const MismatchError& e) {
    py::set_error(t.mismatch, e.what());
  } catch (const GroupFailedError& e) {
    py::set_error(t.groupFailed, e.what());
  } catch (const DeviceError& e) {
    py::set_error(t.device, e.what());
  } catch (const Error& e) {
    py::set_error(t.base, e.what());
  }
}

void setPythonError(std::exception_ptr p) {
  try {
    translateEngineError(p);
  } catch (const std::bad_alloc&) {
    PyErr_NoMemory();
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  } catch (...) {
    PyErr_SetString(PyExc_RuntimeError, "unknown C++ exception");
  }
}

}  // namespace pycollect

PYBIND11_MODULE(_C, m) {
  m.doc() = "pycollect's C++ engine: TCP ring collectives (private; use the pycollect package)";
  pycollect::registerErrors(m);
  pycollect::registerCommunicator(m);
  pycollect::registerTransport(m);
  pycollect::registerLatency(m);
  pycollect::registerBuffers(m);
  pycollect::registerIssueLock(m);
  pycollect::registerFastCalls(m);
  pycollect::registerFastEntry(m);
  // False in a build made with PYCOLLECT_TRACE_HOOKS=OFF (trace/hooks.h): it cannot trace.
  m.attr("TRACE_HOOKS") = pycollect::trace::kHooks;
  // The C++ ABI the engine was built with (its std::string crosses into the torch backend,
  // which takes torch's: pycollect/torch_backend/builder.py compares the two).
  m.attr("CXX11_ABI") = static_cast<int>(_GLIBCXX_USE_CXX11_ABI);
  // The engine's constants that pycollect's pure-Python side (the model, pycollect.tuning)
  // needs without loading the engine, and the documented defaults the bindings' CommOptions
  // cannot show; tests/test_options.py holds the Python copies and the docs to these.
  py::dict defaults;
  defaults["segment_bytes"] = pycollect::Tunables{}.segmentBytes;
  defaults["ring_block_segments"] = pycollect::kBlockSegments;
  defaults["shm_single_copy_bytes"] = pycollect::kDefaultShmSingleCopyBytes;
  defaults["pipeline_slice_segments"] = pycollect::kSliceSegments;
  defaults["pipeline_max_slices"] = pycollect::kMaxSlices;
  defaults["link_timeout"] = pycollect::kDefaultLinkTimeoutSec;
  defaults["shm_collective_bytes"] = py::make_tuple(pycollect::kSharedSmallBytes, pycollect::kSharedBroadcastBytes, pycollect::kSharedLargeBytes);
  defaults["arena_slot_bytes"] = pycollect::kArenaSlotBytes;
  defaults["arena_one_phase_bytes"] = pycollect::kOnePhaseBytes;
  defaults["arena_pipe_bytes"] = pycollect::kArenaPipeBytes;
  m.attr("ENGINE_DEFAULTS") = defaults;
  m.attr("ANY_SOURCE") = pycollect::kAnySource;  // a recv's peer: the first matching message from any rank
  py::dict dtypes;  // name -> (code, bytes an element)
  for (int code = 0; code < pycollect::kNumDTypes; ++code) {
    const auto t = static_cast<pycollect::DType>(code);
    dtypes[pycollect::dtypeName(t)] = py::make_tuple(code, pycollect::dtypeSize(t));
  }
  m.attr("DTYPES") = dtypes;
  m.def(
      "is_writable",
      [](uintptr_t address, size_t nbytes) { return pycollect::isWritable(reinterpret_cast<void*>(address), nbytes); },
      py::arg("address"), py::arg("nbytes"));
  // Exposed for tests of the 16-bit rounding used by the reduction kernels.
  m.def("host_device_stream_counts", [] {  // tests: (created, destroyed) by host devices so far
    auto counts = pycollect::HostDevice::streamCounts();
    return py::make_tuple(counts.first, counts.second);
  });
  m.def("half_round_trip", [](float f) { return pycollect::halfToFloat(pycollect::floatToHalf(f)); });
  m.def("bfloat16_round_trip",
        [](float f) { return pycollect::bfloat16ToFloat(pycollect::floatToBFloat16(f)); });
  // Exposed for the known-answer tests of the handshake's HMAC (tests/test_auth.py).
  m.def("hmac_sha256", [](const py::bytes& key, const py::bytes& msg) {
    std::string k(key), s(msg);
    auto d = pycollect::hmacSha256(k, s.data(), s.size());
    return py::bytes(reinterpret_cast<const char*>(d.data()), d.size());
  });
}
