// The page `soma report` writes (tools/report_template.html, built into the program): the
// trace goes where the template says @TRACE@.
#ifndef SOMA_TOOLS_REPORT_TEMPLATE_HPP
#define SOMA_TOOLS_REPORT_TEMPLATE_HPP

namespace soma::tools {

extern const char* const report_template;

}  // namespace soma::tools

#endif  // SOMA_TOOLS_REPORT_TEMPLATE_HPP
