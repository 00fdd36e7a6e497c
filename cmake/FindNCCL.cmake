# FindNCCL: NVIDIA's collective communication library (nccl.h + libnccl.so / libnccl.so.2).
#
# Looks, in this order, in
#   - NCCL_ROOT / NCCL_HOME / NCCL_DIR (CMake or environment variables): <root>/include, <root>/lib
#   - NCCL_INCLUDE_DIR / NCCL_LIBRARY given directly (cache variables; e.g. a header from one place
#     and the library from another)
#   - the PyPI wheels nvidia-nccl-cu13 / nvidia-nccl-cu12 (torch brings one): site-packages/nvidia/
#     nccl/{include,lib} of the `python3` on PATH (or SPECSTATE_NCCL_PYTHON), asked once through
#     `import nvidia.nccl`; a failing interpreter or a missing package is no error
#   - the system (libnccl-dev: /usr/include/nccl.h, /usr/lib/x86_64-linux-gnu/libnccl.so)
#
# Defines NCCL_FOUND, NCCL_INCLUDE_DIRS, NCCL_LIBRARIES, NCCL_VERSION (from nccl.h) and the
# imported target NCCL::nccl. The wheel ships only libnccl.so.2 (no libnccl.so link), so both
# names are searched; an executable linked against it gets the folder in its build RPATH.
include(FindPackageHandleStandardArgs)

set(_nccl_hints "")
foreach(_var NCCL_ROOT NCCL_HOME NCCL_DIR)
  if(DEFINED ${_var} AND NOT "${${_var}}" STREQUAL "")
    list(APPEND _nccl_hints "${${_var}}")
  endif()
  if(DEFINED ENV{${_var}} AND NOT "$ENV{${_var}}" STREQUAL "")
    list(APPEND _nccl_hints "$ENV{${_var}}")
  endif()
endforeach()

# Python site-packages (nvidia-nccl-cu13 / -cu12). nvidia.nccl is a namespace package in those
# wheels (no __init__.py, so __file__ is None): its __path__ names the folder.
if(NOT NCCL_INCLUDE_DIR OR NOT NCCL_LIBRARY)
  if(NOT DEFINED SPECSTATE_NCCL_PYTHON)
    find_program(SPECSTATE_NCCL_PYTHON NAMES python3 python)
  endif()
  if(SPECSTATE_NCCL_PYTHON AND NOT DEFINED CACHE{SPECSTATE_NCCL_PYTHON_DIR})
    execute_process(
      COMMAND "${SPECSTATE_NCCL_PYTHON}" -c
              "import nvidia.nccl as m; print(list(m.__path__)[0])"
      OUTPUT_VARIABLE _nccl_py_dir ERROR_QUIET RESULT_VARIABLE _nccl_py_rc
      OUTPUT_STRIP_TRAILING_WHITESPACE TIMEOUT 30)
    if(NOT _nccl_py_rc EQUAL 0 OR NOT IS_DIRECTORY "${_nccl_py_dir}")
      set(_nccl_py_dir "")
    endif()
    set(SPECSTATE_NCCL_PYTHON_DIR "${_nccl_py_dir}" CACHE INTERNAL
        "nvidia/nccl of the Python interpreter's site-packages (empty: none)")
  endif()
  if(SPECSTATE_NCCL_PYTHON_DIR)
    list(APPEND _nccl_hints "${SPECSTATE_NCCL_PYTHON_DIR}")
  endif()
endif()

find_path(NCCL_INCLUDE_DIR NAMES nccl.h HINTS ${_nccl_hints} PATH_SUFFIXES include)
find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 NAMES_PER_DIR HINTS ${_nccl_hints}
             PATH_SUFFIXES lib lib64 lib/x86_64-linux-gnu)

set(NCCL_VERSION "")
if(NCCL_INCLUDE_DIR AND EXISTS "${NCCL_INCLUDE_DIR}/nccl.h")
  file(STRINGS "${NCCL_INCLUDE_DIR}/nccl.h" _nccl_lines
       REGEX "^#define NCCL_(MAJOR|MINOR|PATCH)[ \t]+[0-9]+")
  foreach(_part MAJOR MINOR PATCH)
    string(REGEX MATCH "NCCL_${_part}[ \t]+([0-9]+)" _m "${_nccl_lines}")
    set(_nccl_${_part} "${CMAKE_MATCH_1}")
  endforeach()
  if(NOT "${_nccl_MAJOR}" STREQUAL "")
    set(NCCL_VERSION "${_nccl_MAJOR}.${_nccl_MINOR}.${_nccl_PATCH}")
  endif()
endif()

find_package_handle_standard_args(NCCL REQUIRED_VARS NCCL_LIBRARY NCCL_INCLUDE_DIR
                                  VERSION_VAR NCCL_VERSION)
mark_as_advanced(NCCL_INCLUDE_DIR NCCL_LIBRARY)

if(NCCL_FOUND)
  set(NCCL_INCLUDE_DIRS "${NCCL_INCLUDE_DIR}")
  set(NCCL_LIBRARIES "${NCCL_LIBRARY}")
  if(NOT TARGET NCCL::nccl)
    add_library(NCCL::nccl UNKNOWN IMPORTED)
    set_target_properties(NCCL::nccl PROPERTIES IMPORTED_LOCATION "${NCCL_LIBRARY}"
                                                INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
  endif()
endif()
