// `soma report TRACE [-o PAGE]`: a trace from somaMemHistoryExportTrace becomes one HTML page
// that needs no network: memory over time in total and per stream, the peak with its largest
// blocks and holes, and any out-of-memory failure with its message.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "commands.hpp"
#include "report_template.hpp"

namespace soma::tools {
namespace {

constexpr const char* usage = "usage: soma report TRACE.json [-o PAGE.html]\n";

/// The page's name when none is given: TRACE.json -> TRACE.html.
std::string default_page(const std::string& trace) {
  const std::string suffix = ".json";
  if (trace.size() > suffix.size() && trace.ends_with(suffix))
    return trace.substr(0, trace.size() - suffix.size()) + ".html";
  return trace + ".html";
}

/// The trace as it may stand inside a <script> element: '<' never ends it early (JSON allows
/// \u003c in strings, and a '<' outside a string is not JSON).
std::string script_safe(const std::string& json) {
  std::string out;
  out.reserve(json.size());
  for (const char c : json) {
    if (c == '<') {
      out += "\\u003c";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

int run_report(int argc, char** argv) {
  std::string trace_path;
  std::string page_path;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "-o") == 0 && i + 1 < argc) {
      page_path = argv[++i];
    } else if (trace_path.empty() && argv[i][0] != '-') {
      trace_path = argv[i];
    } else {
      std::fprintf(stderr, "soma report: unexpected argument '%s'\n%s", argv[i], usage);
      return 2;
    }
  }
  if (trace_path.empty()) {
    std::fputs(usage, stderr);
    return 2;
  }
  if (page_path.empty()) page_path = default_page(trace_path);
  std::string trace;
  if (!read_whole_file("report", trace_path, &trace)) return 1;
  if (trace.find("\"traceEvents\"") == std::string::npos ||
      trace.find("soma memory history") == std::string::npos) {
    std::fprintf(stderr,
                 "soma report: '%s' is not a trace of soma's memory history (write one with "
                 "somaMemHistoryExportTrace or SOMA_HISTORY_TRACE)\n",
                 trace_path.c_str());
    return 1;
  }
  std::string page = report_template;
  const std::string marker = "@TRACE@";
  page.replace(page.find(marker), marker.size(), script_safe(trace));
  std::ofstream out(page_path);
  out << page;
  out.close();
  if (!out) {
    std::fprintf(stderr, "soma report: cannot write '%s': %s\n", page_path.c_str(),
                 std::strerror(errno));
    return 1;
  }
  std::printf("soma report: wrote %s (%zu KiB); open it in a browser, no network needed\n",
              page_path.c_str(), page.size() / 1024);
  return 0;
}

}  // namespace soma::tools
