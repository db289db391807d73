#include "backend/cpu/openblas_core.h"

#include <cstdlib>
#include <string>

#include <unistd.h>

#include "core/env.h"

extern "C" char* openblas_get_corename(void);

namespace tt::cpu {

void correct_openblas_core(char** argv) {
  if (env::is_set("OPENBLAS_CORETYPE")) return;
  if (env::get_or("TIERTRAIN_OPENBLAS_CORE", "") == "keep") return;
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return;
  const std::string core = openblas_get_corename();
  for (const char* old : {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom", "Katmai", "Coppermine",
                          "Northwood", "Banias", "Generic", "Opteron", "Opteron_SSE3", "Barcelona", "Nano"}) {
    if (core == old) {
      const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("avx512cd");
      setenv("OPENBLAS_CORETYPE", avx512 ? "SkylakeX" : "Haswell", 1);
      setenv("TIERTRAIN_OPENBLAS_CHOSE", core.c_str(), 1);  // for openblas_core_note() after the restart
      execv("/proc/self/exe", argv);
      return;  // exec failed: go on with the kernels OpenBLAS chose
    }
  }
}

std::string openblas_core_note() {
  static const std::string note = [] {
    const std::string chose = env::get_or("TIERTRAIN_OPENBLAS_CHOSE", "");
    if (chose.empty()) return std::string();
    unsetenv("TIERTRAIN_OPENBLAS_CHOSE");
    return "OpenBLAS chose its " + chose + " kernels on a CPU with AVX2 and FMA: running with OPENBLAS_CORETYPE=" +
           env::get_or("OPENBLAS_CORETYPE", "?") +
           " (Note [OpenBLAS core]; TIERTRAIN_OPENBLAS_CORE=keep keeps OpenBLAS's choice)";
  }();
  return note;
}

}  // namespace tt::cpu
