# NCCL for the nccl backend of the collectives (comm/nccl.cc): the CUDA toolkit's (it ships nccl.h and libnccl),
# NCCL_HOME, or the nvidia-nccl wheel PyTorch brings. Sets TT_HAVE_NCCL, NCCL_INCLUDE_DIR and NCCL_LIBRARY; needs
# CUDAToolkit found first.
function(tt_find_nccl)
  set(TT_HAVE_NCCL OFF PARENT_SCOPE)
  if(NOT CUDAToolkit_FOUND OR TIERTRAIN_WITH_NCCL STREQUAL "OFF")
    return()
  endif()
  set(hints ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_LIBRARY_DIR} $ENV{NCCL_HOME})
  file(GLOB wheels /usr/local/lib/python3*/dist-packages/nvidia/nccl /usr/lib/python3/dist-packages/nvidia/nccl)
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${hints} ${wheels} PATH_SUFFIXES include)
  find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ${hints} ${wheels} PATH_SUFFIXES lib lib64)
  if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
    set(TT_HAVE_NCCL ON PARENT_SCOPE)
  endif()
endfunction()
