# pycollect._torch: the "pycollect" torch.distributed backend, a C++ c10d::Backend
# (csrc/torch_backend/). Built against the torch that the build's Python imports: its headers, the
# pybind11 it bundles (pybind11 types then cross between torch._C and this module) and its
# C++ ABI, which the engine library takes too. That torch must be importable at build
# time: `pip install --no-build-isolation .` (an isolated build has no torch). Without
# torch the engine alone is built. The version built against is installed beside the
# module (torch_build.txt).
#
# Either way the backend's sources and the engine's headers are installed with the package
# (pycollect/_csrc): where no module for the running torch was built here (an isolated
# `pip install .`, or torch changed since), pycollect/torch_backend/builder.py compiles one
# from them on first use, into a cache per torch version and ABI.
set(PYCOLLECT_TORCH_SOURCES
  csrc/torch_backend/module.cc
  csrc/torch_backend/backend.cc
  csrc/torch_backend/collectives.cc
  csrc/torch_backend/point_to_point.cc
  csrc/torch_backend/work.cc
  csrc/torch_backend/tensors.cc
  csrc/torch_backend/sparse.cc
  csrc/torch_backend/null_backend.cc
)
install(FILES ${PYCOLLECT_TORCH_SOURCES} DESTINATION pycollect/_csrc/torch_backend)
install(DIRECTORY csrc/ DESTINATION pycollect/_csrc FILES_MATCHING PATTERN "*.h")

set(PYCOLLECT_TORCH "AUTO" CACHE STRING "build the torch backend: AUTO (when torch imports), ON or OFF")
if(PYCOLLECT_TORCH STREQUAL "OFF")
  return()
endif()
execute_process(
  COMMAND "${Python_EXECUTABLE}" -c "import os, torch
print(torch.__version__)
print(os.path.join(os.path.dirname(torch.__file__), 'include'))
print(os.path.join(os.path.dirname(torch.__file__), 'lib'))
print(int(torch._C._GLIBCXX_USE_CXX11_ABI))"
  OUTPUT_VARIABLE _torch_info RESULT_VARIABLE _torch_rc ERROR_VARIABLE _torch_err
  OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT _torch_rc EQUAL 0)
  if(PYCOLLECT_TORCH STREQUAL "ON")
    message(FATAL_ERROR "PYCOLLECT_TORCH=ON but torch does not import in ${Python_EXECUTABLE}: ${_torch_err}")
  endif()
  message(STATUS "pycollect: torch not importable at build time; building the engine without the torch backend")
  return()
endif()
string(REPLACE "\n" ";" _torch_info "${_torch_info}")
list(GET _torch_info 0 PYCOLLECT_TORCH_VERSION)
list(GET _torch_info 1 _torch_include)
list(GET _torch_info 2 _torch_lib)
list(GET _torch_info 3 _torch_abi)
message(STATUS "pycollect: torch backend against torch ${PYCOLLECT_TORCH_VERSION} (${_torch_lib})")

# The engine's std::string and std::shared_ptr cross into the backend: one C++ ABI for both.
target_compile_definitions(pycollect_core PUBLIC _GLIBCXX_USE_CXX11_ABI=${_torch_abi})

python_add_library(_torch MODULE WITH_SOABI ${PYCOLLECT_TORCH_SOURCES})
# torch's include directories first: its bundled pybind11, not the build's. The same flags as
# builder.py's first-use build.
target_include_directories(_torch BEFORE PRIVATE "${_torch_include}" "${_torch_include}/torch/csrc/api/include")
target_compile_definitions(_torch PRIVATE TORCH_EXTENSION_NAME=_torch TORCH_API_INCLUDE_EXTENSION_H
  PYCOLLECT_TORCH_VERSION="${PYCOLLECT_TORCH_VERSION}")
target_compile_options(_torch PRIVATE -O2 -Wall -Wno-unused-parameter)
foreach(_lib torch torch_cpu torch_python c10)
  find_library(_path_${_lib} NAMES ${_lib} PATHS "${_torch_lib}" NO_DEFAULT_PATH REQUIRED)
  target_link_libraries(_torch PRIVATE "${_path_${_lib}}")
endforeach()
target_link_libraries(_torch PRIVATE pycollect_core)
# One translation unit (a unity build): each file spent ~10 of its ~13 s parsing torch's
# headers (ATen/ATen.h comes with c10d's Backend.hpp); parsed once, the module builds in a
# fifth of the CPU time. A precompiled header saved less (a 500 MB .gch, slow to load).
set_target_properties(_torch PROPERTIES INSTALL_RPATH "$ORIGIN;${_torch_lib}" UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 0)
install(TARGETS _torch LIBRARY DESTINATION pycollect)
file(WRITE "${CMAKE_CURRENT_BINARY_DIR}/torch_build.txt" "${PYCOLLECT_TORCH_VERSION}\n")
install(FILES "${CMAKE_CURRENT_BINARY_DIR}/torch_build.txt" DESTINATION pycollect)
