// Fuzz target: the dataset loaders (data/dataset): a text file, a folder of text files (with a subfolder), a token
// shard, a folder of train/val shards, or a mix. The input's first byte picks one file or a folder; the rest is cut
// at "\n--tt-file--\n" into files, each named by its own first byte (text, subfolder text, train shard, val shard,
// other shard). An accepted dataset must hold tokens below its vocabulary.
#include <string>

#include "data/dataset.h"
#include "fuzz_util.h"

namespace {
constexpr std::string_view kCut = "\n--tt-file--\n";
const char* const kNames[] = {"%02d.txt", "sub/%02d.txt", "train_%02d.bin", "val_%02d.bin", "tok_%02d.bin"};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const bool folder = (data[0] & 1) != 0;
  const double val_fraction = (data[0] >> 1) % 4 * 0.1;  // 0, 0.1, 0.2, 0.3
  std::string_view rest = tt::fuzz::as_text(data + 1, size - 1);
  const tt::fuzz::Scratch& scratch = tt::fuzz::Scratch::get();
  const std::string dir = scratch.fresh_folder("data");
  std::string path;
  for (int i = 0; i < 16 && (i == 0 || !rest.empty()); ++i) {
    const size_t cut = rest.find(kCut);
    std::string_view chunk = rest.substr(0, cut);
    rest = cut == std::string_view::npos ? std::string_view() : rest.substr(cut + kCut.size());
    const int kind = chunk.empty() ? 0 : static_cast<unsigned char>(chunk[0]) % 5;
    char name[32];
    std::snprintf(name, sizeof name, kNames[kind], i);
    path = scratch.write("data/" + std::string(name), chunk.empty() ? chunk : chunk.substr(1));
    if (!folder) break;
  }
  auto ds = tt::data::TokenDataset::load(folder ? dir : path, val_fraction);
  if (!tt::fuzz::accepted(ds)) return 0;
  const int vocab = ds.value().vocab();
  // Text, GPT-2's shards, or uint32 shards (the vocabulary their largest token + 1, GPT-2's at least beside its own).
  TT_FUZZ_REQUIRE(vocab == tt::data::kByteVocab || vocab == tt::data::kGpt2Vocab || ds.value().train().wide() ||
                  ds.value().val().wide());
  for (const auto* split : {&ds.value().train(), &ds.value().val()})
    for (size_t i = 0; i < split->size(); ++i) TT_FUZZ_REQUIRE((*split)[i] >= 0 && (*split)[i] < vocab);
  (void)ds.value().describe();
  return 0;
}
