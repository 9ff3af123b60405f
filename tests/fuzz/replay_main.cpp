// main for the fuzz targets without libFuzzer (any compiler): runs each file named on the
// command line, or each file in each directory named, through LLVMFuzzerTestOneInput. The
// normal test build uses it to replay the seed corpora and the regressions as a plain test.
//
//   api_ops_fuzz_replay corpus/api_ops_fuzz --repeat=20 regressions/api_ops_fuzz
//
// --repeat=N runs each later input N times: an input that found a race finds it again only
// now and then.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv);
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

void replay(const std::filesystem::path& file, int repeat) {
  std::ifstream stream(file, std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(stream)),
                                std::istreambuf_iterator<char>());
  std::printf("replay %s (%zu B) x%d\n", file.c_str(), bytes.size(), repeat);
  std::fflush(stdout);
  for (int i = 0; i < repeat; ++i)
    LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
}

}  // namespace

int main(int argc, char** argv) {
  LLVMFuzzerInitialize(&argc, &argv);
  int replayed = 0;
  int repeat = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string argument = argv[i];
    if (argument.rfind("--repeat=", 0) == 0) {
      repeat = std::max(1, std::atoi(argument.c_str() + 9));
      continue;
    }
    const std::filesystem::path path(argument);
    if (std::filesystem::is_directory(path)) {
      std::vector<std::filesystem::path> files;
      for (const auto& entry : std::filesystem::directory_iterator(path))
        if (entry.is_regular_file()) files.push_back(entry.path());
      std::sort(files.begin(), files.end());
      for (const auto& file : files) {
        replay(file, repeat);
        ++replayed;
      }
    } else if (std::filesystem::exists(path)) {
      replay(path, repeat);
      ++replayed;
    }
  }
  std::printf("%d inputs replayed without a finding\n", replayed);
  return 0;
}
