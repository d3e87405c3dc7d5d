#pragma once
// The plain host buffer behind a Python object, read in C++ without Python's per-call
// objects: a numpy array's fields (array_span, register_buffers.cc) or a CPU torch tensor's
// (the API's fast calls, register_fast_calls.cc). Only the plain case is answered; anything
// else is "no", and Python's _buffers.as_buffer asks again the slow way, which raises the
// error that names what is wrong. So refusals and their messages live in one place.
//
#include <Python.h>

#include "common/host_span.h"

namespace pycollect {

// A C-contiguous, aligned, native-order numpy array of an engine dtype (writable where
// `writable`): true and its span; false for anything else, numpy or not.
bool plainArraySpan(PyObject* obj, bool writable, HostSpan& out);

// The same for a torch.Tensor (exactly that type: a subclass may override what is read):
// on the CPU, strided, contiguous, of an engine dtype, aligned, and writable where
// `writable`. False until torch is known (knowTorch), and for anything else.
bool plainTensorSpan(PyObject* obj, bool writable, HostSpan& out);

// What plainTensorSpan needs of torch, given once the process has imported it
// (pycollect/_buffers.py): the Tensor type, the strided layout, {torch.dtype: code}. It
// reads a tensor through its Python attributes (some 0.3 us).
void knowTorch(PyObject* tensorType, PyObject* strided, PyObject* dtypeCodes);

// A reader of tensors in C++ (pycollect._torch's, torch_backend/tensors.h: the tensor's
// own fields, some nanoseconds) where the process has that module; plainTensorSpan then
// asks it instead.
void knowTensorReader(TensorReader reader);

}  // namespace pycollect
