#include "json_value.hpp"

#include <cctype>
#include <cstdlib>

namespace soma::tools {
namespace {

class parser {
 public:
  explicit parser(std::string_view text) : text_(text) {}

  bool document(json_value* out, std::string* error) {
    bool ok = value(out, 0);
    skip_space();
    if (ok && at_ < text_.size()) ok = fail("text after the value");
    if (!ok) {
      *error = "byte " + std::to_string(at_) + ": " + error_;
      return false;
    }
    return true;
  }

 private:
  static constexpr int max_depth = 64;

  bool fail(const char* what) {
    if (error_.empty()) error_ = what;
    return false;
  }
  void skip_space() {
    while (at_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[at_]))) ++at_;
  }
  bool literal(std::string_view word) {
    if (text_.substr(at_, word.size()) != word) return fail("unexpected word");
    at_ += word.size();
    return true;
  }
  bool value(json_value* out, int depth) {
    if (depth > max_depth) return fail("nested too deeply");
    skip_space();
    if (at_ >= text_.size()) return fail("unexpected end");
    const char c = text_[at_];
    if (c == '{') return object(out, depth);
    if (c == '[') return array(out, depth);
    if (c == '"') {
      out->what = json_value::kind::string;
      return string(&out->text);
    }
    if (c == 't' || c == 'f') {
      out->what = json_value::kind::boolean;
      out->boolean = c == 't';
      return literal(c == 't' ? "true" : "false");
    }
    if (c == 'n') return literal("null");
    return number(out);
  }
  bool number(json_value* out) {
    const std::size_t start = at_;
    while (at_ < text_.size() &&
           (std::isdigit(static_cast<unsigned char>(text_[at_])) || text_[at_] == '-' ||
            text_[at_] == '+' || text_[at_] == '.' || text_[at_] == 'e' || text_[at_] == 'E'))
      ++at_;
    if (at_ == start) return fail("expected a value");
    out->what = json_value::kind::number;
    out->text = std::string(text_.substr(start, at_ - start));
    return true;
  }
  bool string(std::string* out) {
    ++at_;  // the opening quote
    while (at_ < text_.size() && text_[at_] != '"') {
      char c = text_[at_++];
      if (c == '\\') {
        if (at_ >= text_.size()) return fail("unfinished escape");
        c = text_[at_++];
        if (c == 'u') {
          if (at_ + 4 > text_.size()) return fail("short \\u escape");
          const unsigned code = static_cast<unsigned>(
              std::strtoul(std::string(text_.substr(at_, 4)).c_str(), nullptr, 16));
          at_ += 4;
          if (code < 0x80) {
            out->push_back(static_cast<char>(code));
          } else {
            out->push_back('?');  // soma writes only ASCII escapes
          }
          continue;
        }
        static constexpr std::string_view from = "\"\\/bfnrt";
        static constexpr std::string_view to = "\"\\/\b\f\n\r\t";
        const std::size_t which = from.find(c);
        if (which == std::string_view::npos) return fail("unknown escape");
        out->push_back(to[which]);
      } else {
        out->push_back(c);
      }
    }
    if (at_ >= text_.size()) return fail("unfinished string");
    ++at_;  // the closing quote
    return true;
  }
  /// The elements of an array or object, from its opening bracket to `close`, each read by
  /// element(); `what` names the error when neither a comma nor `close` follows one.
  template <typename Element>
  bool elements(char close, const char* what, Element element) {
    ++at_;
    skip_space();
    if (at_ < text_.size() && text_[at_] == close) return ++at_, true;
    for (;;) {
      if (!element()) return false;
      skip_space();
      if (at_ < text_.size() && text_[at_] == ',') {
        ++at_;
        continue;
      }
      if (at_ < text_.size() && text_[at_] == close) return ++at_, true;
      return fail(what);
    }
  }
  bool array(json_value* out, int depth) {
    out->what = json_value::kind::array;
    return elements(']', "expected , or ] in an array", [&] {
      out->items.emplace_back();
      return value(&out->items.back(), depth + 1);
    });
  }
  bool object(json_value* out, int depth) {
    out->what = json_value::kind::object;
    return elements('}', "expected , or } in an object", [&] {
      skip_space();
      if (at_ >= text_.size() || text_[at_] != '"') return fail("expected a member name");
      std::string key;
      if (!string(&key)) return false;
      skip_space();
      if (at_ >= text_.size() || text_[at_] != ':') return fail("expected :");
      ++at_;
      out->names.push_back(std::move(key));
      out->items.emplace_back();
      return value(&out->items.back(), depth + 1);
    });
  }

  std::string_view text_;
  std::size_t at_ = 0;
  std::string error_;
};

}  // namespace

const json_value* json_value::find(std::string_view key) const {
  if (what != kind::object) return nullptr;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (names[i] == key) return &items[i];
  }
  return nullptr;
}

std::string json_value::string_or(std::string_view key, const std::string& fallback) const {
  const json_value* member = find(key);
  return member != nullptr && member->what == kind::string ? member->text : fallback;
}

std::uint64_t json_value::unsigned_or(std::string_view key, std::uint64_t fallback) const {
  const json_value* member = find(key);
  if (member == nullptr) return fallback;
  if (member->what == kind::number || member->what == kind::string)
    return std::strtoull(member->text.c_str(), nullptr, 0);
  return fallback;
}

double json_value::number_or(std::string_view key, double fallback) const {
  const json_value* member = find(key);
  return member != nullptr && member->what == kind::number
             ? std::strtod(member->text.c_str(), nullptr)
             : fallback;
}

bool parse_json(std::string_view text, json_value* out, std::string* error) {
  return parser(text).document(out, error);
}

}  // namespace soma::tools
