// backend/cpu/openblas_core: the CPU backend's correction of OpenBLAS's kernel choice (Note [OpenBLAS core]). A
// program that uses the CPU backend calls correct_openblas_core(argv) first thing in main(): it may execute the
// program again, once, with OPENBLAS_CORETYPE set.
//
//   int main(int argc, char** argv) {
//     tt::cpu::correct_openblas_core(argv);
//     ...
//     if (auto note = tt::cpu::openblas_core_note(); !note.empty()) TT_LOG(INFO, EXEC, "%s", note.c_str());
#pragma once

#include <string>

namespace tt::cpu {

// Note [OpenBLAS core]
// Debian's OpenBLAS (0.3.21, DYNAMIC_ARCH) picks its kernels when it is loaded, from the CPU's model number; a CPU
// newer than it knows (a Xeon with AVX-512, say) gets its "Prescott" kernels, SSE3 only, and the CPU backend's GEMMs
// (most of a step) run several times slower. OPENBLAS_CORETYPE overrides the choice but is read only at load time,
// so when OpenBLAS chose a core without AVX2 on a CPU that has AVX2 and FMA, and the user did not set the variable,
// tiertrain sets OPENBLAS_CORETYPE (SkylakeX, its AVX-512 kernels, where the CPU has AVX-512 F/BW/DQ/VL/CD; else
// Haswell, its AVX2 kernels) and executes itself again, once (TIERTRAIN_OPENBLAS_CHOSE tells the new process what
// OpenBLAS had chosen). The results do not change: the golden tests against PyTorch pass with each core.
// TIERTRAIN_OPENBLAS_CORE=keep turns this off.
void correct_openblas_core(char** argv);

// After a re-execution: the line that says what OpenBLAS had chosen and what runs instead ("" when nothing was
// corrected). The first call takes TIERTRAIN_OPENBLAS_CHOSE out of the environment, so the ranks and programs this
// process starts decide for themselves.
std::string openblas_core_note();

}  // namespace tt::cpu
