// The fuzz targets without libFuzzer: a main that feeds every file under the folders (or files) it is given to the
// target's LLVMFuzzerTestOneInput, one at a time, and says how many it ran. tests/CMakeLists.txt builds each target
// with it in the normal build and CTest replays the committed seeds (tests/fuzz/corpus/TARGET/) and the inputs that
// once broke the target (tests/fuzz/regressions/TARGET/) on every test run: a crash, a failed fuzz property (abort)
// or a hang fails the test. Fuzzing proper (libFuzzer, ASan, UBSan) is scripts/fuzz.sh, in `scripts/test.sh --full`.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

bool replay(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "fuzz replay: cannot read %s\n", file.c_str());
    return false;
  }
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::fprintf(stderr, "fuzz replay: %s (%zu bytes)\n", file.c_str(), bytes.size());
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  int inputs = 0;
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path p(argv[i]);
    std::error_code ec;
    if (!std::filesystem::exists(p, ec)) continue;  // a target with no regressions yet has no folder
    std::vector<std::filesystem::path> files;
    if (std::filesystem::is_directory(p, ec)) {
      for (const auto& e : std::filesystem::directory_iterator(p)) {
        if (e.is_regular_file()) files.push_back(e.path());
      }
    } else {
      files.push_back(p);
    }
    for (const auto& f : files) {
      if (!replay(f)) return 1;
      ++inputs;
    }
  }
  if (inputs == 0) {
    std::fprintf(stderr, "fuzz replay: no inputs under the paths given\n");
    return 1;
  }
  std::printf("fuzz replay: %d input(s), no crash and no failed property\n", inputs);
  return 0;
}
