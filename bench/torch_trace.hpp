// A PyTorch allocation trace as integrations/torch writes it (SOMA_TORCH_TRACE): `a ID BYTES`
// and `f ID` lines. Read whole, once, by the benches that replay it (trace_replay on the pool
// logic, trace_calls through the C API); a .gz is read through gzip -dc. A trace that cannot be
// read is an error naming the line: a replay of what came before it would report figures of
// nothing.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace soma_bench {

struct trace_event {
  bool allocate = false;
  std::uint64_t id = 0;
  std::size_t bytes = 0;  ///< allocations only
};

/// The events of the trace at path, or the program (named `program` in the message) exits with
/// status 2: the file cannot be opened or decompressed, a line is neither `a ID BYTES` nor
/// `f ID`, or nothing is allocated.
inline std::vector<trace_event> read_torch_trace(const std::string& path, const char* program) {
  auto fail = [&](const std::string& why) {
    std::fprintf(stderr, "%s: %s: %s\n", program, path.c_str(), why.c_str());
    std::exit(2);
  };
  if (FILE* readable = std::fopen(path.c_str(), "r")) {
    std::fclose(readable);
  } else {
    fail("cannot open it");
  }
  const bool gzipped = path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
  const std::string command = "gzip -dc '" + path + "' 2>/dev/null";
  FILE* in = gzipped ? popen(command.c_str(), "r") : std::fopen(path.c_str(), "r");
  if (in == nullptr) fail("cannot open it");
  std::vector<trace_event> events;
  std::size_t allocations = 0;
  char line[256];
  for (std::size_t number = 1; std::fgets(line, sizeof line, in) != nullptr; ++number) {
    char kind = 0;
    unsigned long long id = 0;
    unsigned long long bytes = 0;
    char rest = 0;
    trace_event e;
    if (std::sscanf(line, " a %llu %llu %c", &id, &bytes, &rest) == 2) {
      e.allocate = true;
      e.bytes = static_cast<std::size_t>(bytes);
      ++allocations;
    } else if (std::sscanf(line, " f %llu %c", &id, &rest) == 1) {
    } else if (std::sscanf(line, " %c", &kind) != 1) {
      continue;  // a blank line
    } else {
      line[std::strcspn(line, "\n")] = '\0';
      fail("line " + std::to_string(number) + ": expected 'a ID BYTES' or 'f ID', found '" +
           std::string(line).substr(0, 40) + "'");
    }
    e.id = id;
    events.push_back(e);
  }
  const bool read_error = std::ferror(in) != 0;
  const int closed = gzipped ? pclose(in) : std::fclose(in);
  if (read_error || closed != 0)
    fail(gzipped ? "gzip -dc could not decompress it" : "reading it failed");
  if (allocations == 0) fail("no allocation in it (a trace has 'a ID BYTES' lines)");
  return events;
}

}  // namespace soma_bench
