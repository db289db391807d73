# Finds the OpenMP build of OpenBLAS (Debian: libopenblas-openmp-dev), whose threads are the same libgomp pool as
# OpenMP code's. Honours CMAKE_PREFIX_PATH (so a package unpacked into a prefix works too).
# Defines OpenBLASOpenMP_FOUND, OpenBLASOpenMP_LIBRARY, OpenBLASOpenMP_INCLUDE_DIR and the target OpenBLAS::OpenMP.
set(_tt_arch ${CMAKE_LIBRARY_ARCHITECTURE})
find_path(OpenBLASOpenMP_INCLUDE_DIR NAMES cblas.h openblas_config.h
          PATH_SUFFIXES include/${_tt_arch}/openblas-openmp ${_tt_arch}/openblas-openmp openblas-openmp
          NO_CMAKE_SYSTEM_PATH HINTS /usr)
find_library(OpenBLASOpenMP_LIBRARY NAMES openblas
             PATH_SUFFIXES lib/${_tt_arch}/openblas-openmp ${_tt_arch}/openblas-openmp openblas-openmp
             NO_CMAKE_SYSTEM_PATH HINTS /usr/lib /usr)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(OpenBLASOpenMP DEFAULT_MSG OpenBLASOpenMP_LIBRARY OpenBLASOpenMP_INCLUDE_DIR)
if(OpenBLASOpenMP_FOUND AND NOT TARGET OpenBLAS::OpenMP)
  add_library(OpenBLAS::OpenMP UNKNOWN IMPORTED)
  set_target_properties(OpenBLAS::OpenMP PROPERTIES IMPORTED_LOCATION "${OpenBLASOpenMP_LIBRARY}"
                        INTERFACE_INCLUDE_DIRECTORIES "${OpenBLASOpenMP_INCLUDE_DIR}")
endif()
mark_as_advanced(OpenBLASOpenMP_INCLUDE_DIR OpenBLASOpenMP_LIBRARY)
