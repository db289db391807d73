// Fuzz target: the .ttf reader (core/tensorfile), which checkpoints and golden references go through. Every accepted
// file's tensors are read back (dtype, shape and CRC checked); an accepted tensor can never be larger than the file.
#include <vector>

#include "core/tensorfile.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = tt::fuzz::Scratch::get().write("input.ttf", tt::fuzz::as_text(data, size));
  auto r = tt::TensorFileReader::open(path);
  if (!tt::fuzz::accepted(r)) return 0;
  const tt::TensorFileReader& reader = r.value();
  (void)reader.meta().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  for (const tt::TensorFileEntry& e : reader.entries()) {
    TT_FUZZ_REQUIRE(e.bytes <= size && e.offset <= size);
    TT_FUZZ_REQUIRE(reader.find(e.name) != nullptr);
    std::vector<unsigned char> dst(e.bytes);
    (void)reader.read(e.name, e.dtype, e.shape, dst.data());
  }
  return 0;
}
