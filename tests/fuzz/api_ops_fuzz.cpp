// Fuzz target: sequences of C API operations on one thread, over several streams, events and
// pools of two cpu devices, with the promises of api_model.hpp checked after every step and a
// cleanup that must give every byte back. Input format: op_decoder.hpp.
#include <cstddef>
#include <cstdint>

#include "fuzz_config.hpp"
#include "op_decoder.hpp"
#include "session.hpp"

namespace {

constexpr std::size_t kMaxOperations = 256;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  soma_fuzz::configure_fuzz_backend();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  soma_fuzz::input_bytes input(data, size);
  soma_fuzz::session session;
  for (std::size_t step = 0; step < kMaxOperations && !input.empty(); ++step) {
    session.apply(soma_fuzz::decode_operation(input));
    session.check_invariants();
  }
  session.finish();
  return 0;
}
