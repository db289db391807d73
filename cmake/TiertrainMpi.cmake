# tt_find_mpi(): TT_HAVE_MPI ON where TIERTRAIN_WITH_MPI allows it and CMake finds MPI for C++ (MPI::MPI_CXX), for the
# program's build and the Python package's alike. A macro: find_package's variables stay in the caller's scope.
macro(tt_find_mpi)
  set(TT_HAVE_MPI OFF)
  if(NOT TIERTRAIN_WITH_MPI STREQUAL "OFF")
    find_package(MPI COMPONENTS CXX QUIET)
    if(MPI_CXX_FOUND)
      set(TT_HAVE_MPI ON)
    endif()
  endif()
endmacro()
