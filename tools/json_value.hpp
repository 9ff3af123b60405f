// A small JSON reader for the traces soma writes (somaMemHistoryExportTrace): objects, arrays,
// strings, numbers, true, false, null. Numbers keep their text, so 64-bit integers stay exact.
#ifndef SOMA_TOOLS_JSON_VALUE_HPP
#define SOMA_TOOLS_JSON_VALUE_HPP

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace soma::tools {

struct json_value {
  enum class kind { null, boolean, number, string, array, object };
  kind what = kind::null;
  bool boolean = false;
  std::string text;                ///< string: the text; number: its digits as written
  std::vector<json_value> items;   ///< array; object: the members' values
  std::vector<std::string> names;  ///< object: the members' names, in order, beside items

  /// The member named key, or nullptr (also when this is not an object).
  const json_value* find(std::string_view key) const;
  /// A member's string, or fallback.
  std::string string_or(std::string_view key, const std::string& fallback = "") const;
  /// A member's number as an unsigned integer (0x... strings too), or fallback.
  std::uint64_t unsigned_or(std::string_view key, std::uint64_t fallback = 0) const;
  /// A member's number, or fallback.
  double number_or(std::string_view key, double fallback = 0) const;
};

/// Parses text; on bad JSON returns false with where and what in *error.
bool parse_json(std::string_view text, json_value* out, std::string* error);

}  // namespace soma::tools

#endif  // SOMA_TOOLS_JSON_VALUE_HPP
