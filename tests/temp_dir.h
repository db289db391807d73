// A temporary directory removed (recursively) when the object goes away.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace tt::testing {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "tiertrain-test-XXXXXX").string();
    char* p = mkdtemp(tmpl.data());
    path_ = p ? p : "";
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  std::string write(const std::string& name, const std::string& content) const {
    std::ofstream(file(name), std::ios::binary) << content;
    return file(name);
  }

 private:
  std::string path_;
};

// A file's bytes ("" when it cannot be read).
inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// Deterministic English-like text of about `bytes` bytes, for datasets in tests.
inline std::string synthetic_text(size_t bytes, unsigned seed = 1) {
  static const char* kWords[] = {"the", "memory", "of", "a", "device", "is", "never", "enough", "for", "large",
                                 "models", "so", "we", "swap", "and", "recompute", "tensors", "while", "the",
                                 "optimizer", "runs", "on", "host", "cores", "quickly"};
  std::string s;
  unsigned x = seed;
  while (s.size() < bytes) {
    x = x * 1103515245u + 12345u;
    s += kWords[(x >> 16) % (sizeof(kWords) / sizeof(kWords[0]))];
    s += ((x >> 8) % 11 == 0) ? ".\n" : " ";
  }
  return s;
}

}  // namespace tt::testing
