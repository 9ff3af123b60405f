// The subcommands of the soma program and the small helpers they share.
#ifndef SOMA_TOOLS_COMMANDS_HPP
#define SOMA_TOOLS_COMMANDS_HPP

#include <cstdint>
#include <string>

namespace soma::tools {

/** `soma info`: backend, devices, pools, environment. Returns the exit status. */
int run_info(int argc, char** argv);
/** `soma demo`: the producer/consumer/releaser story on four pools, the reuse policies (S11)
 *  included. Returns the exit status. */
int run_demo(int argc, char** argv);

/** `soma report TRACE [-o PAGE]`: the HTML page of a memory-history trace. Returns the exit
 *  status. */
int run_report(int argc, char** argv);

/** `soma replay TRACE [--try SETTINGS]...`: the trace replayed on the pool logic under the
 *  recorded settings and others, side by side. Returns the exit status. */
int run_replay(int argc, char** argv);

/** The whole file at path into *text; false after printing "soma COMMAND: cannot read 'PATH':
 *  REASON" to stderr. */
bool read_whole_file(const char* command, const std::string& path, std::string* text);

/** "64 MiB", "1.50 MiB (1572864 B)", "unlimited" for UINT64_MAX. */
std::string format_bytes(std::uint64_t bytes);

}  // namespace soma::tools

#endif  // SOMA_TOOLS_COMMANDS_HPP
