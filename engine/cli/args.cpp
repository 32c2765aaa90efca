// See args.hpp.
#include "engine/cli/args.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <utility>

#include <fmt/format.h>

#include "engine/core/allocator.hpp"
#include "engine/core/edit_distance.hpp"
#include "engine/core/error.hpp"
#include "engine/core/input_error.hpp"

namespace cleave::cli {
namespace {

constexpr std::size_t kHelpColumn = 24;

bool takes_value(ArgKind kind) { return kind != ArgKind::kSwitch; }

ArgSpec spec_of(std::string name, ArgKind kind, std::string metavar, std::string help) {
  ArgSpec spec;
  spec.name = std::move(name);
  spec.kind = kind;
  spec.metavar = std::move(metavar);
  spec.help = std::move(help);
  return spec;
}

std::optional<std::int64_t> whole_number(std::string_view text) {
  std::int64_t value = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size()) return std::nullopt;
  return value;
}

}  // namespace

// ---- Args ----

const Args::Value& Args::value(std::string_view name, ArgKind kind) const {
  const auto it = values_.find(name);
  CLEAVE_ASSERT(it != values_.end(), "option {} was never declared", name);
  CLEAVE_ASSERT(it->second.kind == kind, "option {} is read as another kind than it was declared", name);
  return it->second;
}

bool Args::given(std::string_view name) const {
  const auto it = values_.find(name);
  CLEAVE_ASSERT(it != values_.end(), "option {} was never declared", name);
  return it->second.given;
}

bool Args::on(std::string_view name) const { return value(name, ArgKind::kSwitch).given; }

std::string Args::text(std::string_view name) const {
  const Value& v = value(name, ArgKind::kText);
  return v.texts.empty() ? std::string() : v.texts.back();
}

std::int64_t Args::count(std::string_view name) const {
  const Value& v = value(name, ArgKind::kCount);
  CLEAVE_ASSERT(!v.ints.empty(), "option {} has no default and was not given; check given() first", name);
  return v.ints.back();
}

double Args::number(std::string_view name) const { return value(name, ArgKind::kNumber).number; }

std::optional<std::int64_t> Args::size(std::string_view name) const {
  const Value& v = value(name, ArgKind::kSize);
  if (v.ints.empty()) return std::nullopt;
  return v.ints.back();
}

std::vector<std::int64_t> Args::counts(std::string_view name) const { return value(name, ArgKind::kCountList).ints; }

std::vector<std::string> Args::all(std::string_view name) const { return value(name, ArgKind::kRepeated).texts; }

// ---- ArgParser ----

ArgParser::ArgParser(std::string command, std::string usage, std::string about)
    : command_(std::move(command)), usage_(std::move(usage)), about_(std::move(about)) {}

ArgParser& ArgParser::add(ArgSpec spec) {
  CLEAVE_ASSERT(spec.name.starts_with("--") && find(spec.name) == nullptr && spec.name != "--help",
                "{}: option {} declared twice or misnamed", command_, spec.name);
  specs_.push_back(std::move(spec));
  return *this;
}

ArgParser& ArgParser::flag(std::string name, std::string help) {
  return add(spec_of(std::move(name), ArgKind::kSwitch, "", std::move(help)));
}

ArgParser& ArgParser::text(std::string name, std::string metavar, std::string help,
                           std::optional<std::string> default_text) {
  ArgSpec spec = spec_of(std::move(name), ArgKind::kText, std::move(metavar), std::move(help));
  spec.default_text = std::move(default_text);
  return add(std::move(spec));
}

ArgParser& ArgParser::count(std::string name, std::string metavar, std::string help,
                            std::optional<std::int64_t> default_value, std::int64_t min, std::int64_t max) {
  ArgSpec spec = spec_of(std::move(name), ArgKind::kCount, std::move(metavar), std::move(help));
  if (default_value) spec.default_text = std::to_string(*default_value);
  spec.min = min;
  spec.max = max;
  return add(std::move(spec));
}

ArgParser& ArgParser::number(std::string name, std::string metavar, std::string help,
                             std::optional<double> default_value, double min) {
  ArgSpec spec = spec_of(std::move(name), ArgKind::kNumber, std::move(metavar), std::move(help));
  if (default_value) spec.default_text = fmt::format("{}", *default_value);
  spec.min = static_cast<std::int64_t>(min);
  return add(std::move(spec));
}

ArgParser& ArgParser::size(std::string name, std::string metavar, std::string help) {
  return add(spec_of(std::move(name), ArgKind::kSize, std::move(metavar), std::move(help)));
}

ArgParser& ArgParser::count_list(std::string name, std::string metavar, std::string help, std::int64_t min) {
  ArgSpec spec = spec_of(std::move(name), ArgKind::kCountList, std::move(metavar), std::move(help));
  spec.min = min;
  return add(std::move(spec));
}

ArgParser& ArgParser::repeated(std::string name, std::string metavar, std::string help) {
  return add(spec_of(std::move(name), ArgKind::kRepeated, std::move(metavar), std::move(help)));
}

ArgParser& ArgParser::config_overrides() {
  return repeated("--set", "key.path=value",
                  "override one config key (repeatable), e.g. --set optimizer.lr=3e-4 --set train.steps=100;\n"
                  "the value is parsed as JSON when it parses, else taken as a string");
}

ArgParser& ArgParser::positional(std::string metavar, std::string what) {
  positionals_.emplace_back(std::move(metavar), std::move(what));
  return *this;
}

ArgParser& ArgParser::positionals(std::string metavar, std::string what) {
  positionals_.emplace_back(std::move(metavar), std::move(what));
  last_repeats_ = true;
  return *this;
}

ArgParser& ArgParser::epilog(std::string text) {
  epilog_ = std::move(text);
  return *this;
}

const ArgSpec* ArgParser::find(std::string_view name) const {
  for (const auto& s : specs_) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

std::string ArgParser::known_options() const {
  std::string out;
  for (const auto& s : specs_) out += s.name + ", ";
  return out + "--help";
}

void ArgParser::read_value(const ArgSpec& spec, const std::string& text, Args::Value& value) const {
  const std::string& flag = spec.name;
  switch (spec.kind) {
    case ArgKind::kSwitch:
      break;
    case ArgKind::kText:
    case ArgKind::kRepeated:
      value.texts.push_back(text);
      break;
    case ArgKind::kCount: {
      const auto n = whole_number(text);
      const std::string upper =
          spec.max < std::numeric_limits<std::int32_t>::max() ? fmt::format(" and <= {}", spec.max) : "";
      CLEAVE_CHECK(n && *n >= spec.min && *n <= spec.max, "{}: {} expects a whole number >= {}{}, got '{}'", command_,
                   flag, spec.min, upper, text);
      value.ints.assign(1, *n);
      break;
    }
    case ArgKind::kNumber: {
      double n = 0;
      const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
      const bool ok = !text.empty() && ec == std::errc() && ptr == text.data() + text.size() && std::isfinite(n) &&
                      n >= static_cast<double>(spec.min);
      CLEAVE_CHECK(ok, "{}: {} expects a {}, got '{}'", command_, flag,
                   spec.min == 0 ? std::string("non-negative number") : fmt::format("number >= {}", spec.min), text);
      value.number = n;
      break;
    }
    case ArgKind::kSize:
      value.ints.assign(1, parse_bytes(text, fmt::format("{}: {}", command_, flag)));
      break;
    case ArgKind::kCountList: {
      std::vector<std::int64_t> list;
      std::size_t start = 0;
      while (start <= text.size()) {
        const std::size_t comma = std::min(text.find(',', start), text.size());
        const auto n = whole_number(std::string_view(text).substr(start, comma - start));
        CLEAVE_CHECK(n && *n >= spec.min && *n <= spec.max,
                     "{}: {} expects a comma-separated list of whole numbers >= {}, got '{}'", command_, flag, spec.min,
                     text);
        list.push_back(*n);
        start = comma + 1;
      }
      std::sort(list.begin(), list.end());
      list.erase(std::unique(list.begin(), list.end()), list.end());
      value.ints = std::move(list);
      break;
    }
  }
  value.given = true;
}

Args ArgParser::parse(int argc, char** argv) const {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  return parse(args);
}

// Every error reading the words is bad input (InputError: `cleave` exits ExitCode::kBadInput, cleave run does not
// restart it); a value's own reader (parse_bytes) throws a plain Error, made one here.
Args ArgParser::parse(const std::vector<std::string>& args) const {
  try {
    return read_words(args);
  } catch (const InputError&) {
    throw;
  } catch (const Error& e) {
    throw InputError(e.what());
  }
}

Args ArgParser::read_words(const std::vector<std::string>& args) const {
  Args out;
  for (const auto& spec : specs_) {
    Args::Value& v = out.values_[spec.name];
    v.kind = spec.kind;
    if (spec.default_text) {
      read_value(spec, *spec.default_text, v);
      v.given = false;
    }
  }
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--help" || arg == "-h") {
      out.help_ = true;
      return out;
    }
    if (arg.size() > 1 && arg.starts_with("-")) {
      const std::size_t eq = arg.find('=');
      const std::string name = arg.substr(0, eq);
      const ArgSpec* spec = find(name);
      if (spec == nullptr) {
        std::vector<std::string> names;
        for (const auto& s : specs_) names.push_back(s.name);
        const std::string near = closest_spelling(name, names);
        CLEAVE_THROW("{}: unknown option '{}'{}; known: {} (see cleave {} --help)", command_, name,
                     near.empty() ? "" : fmt::format(" (did you mean {}?)", near), known_options(), command_);
      }
      Args::Value& v = out.values_[spec->name];
      if (!takes_value(spec->kind)) {
        CLEAVE_CHECK(eq == std::string::npos, "{}: {} takes no value, got '{}'", command_, name, arg.substr(eq + 1));
        v.given = true;
        continue;
      }
      std::string text;
      if (eq != std::string::npos) {
        text = arg.substr(eq + 1);
      } else {
        CLEAVE_CHECK(i + 1 < args.size(), "{}: {} needs a value: {} {} (see cleave {} --help)", command_, name, name,
                     spec->metavar, command_);
        text = args[++i];
      }
      if (spec->kind != ArgKind::kRepeated) v.texts.clear();
      read_value(*spec, text, v);
      continue;
    }
    if (out.positionals_.size() >= positionals_.size() && !last_repeats_) {
      CLEAVE_CHECK(!positionals_.empty(), "{}: unexpected argument '{}' (options: {}; see cleave {} --help)", command_,
                   arg, known_options(), command_);
      CLEAVE_THROW("{}: more than one {} given ('{}' and '{}')", command_, positionals_.back().second,
                   out.positionals_.back(), arg);
    }
    out.positionals_.push_back(arg);
  }
  return out;
}

bool ArgParser::print_help_if_asked(const Args& args) const {
  if (!args.help()) return false;
  std::fputs(help_text().c_str(), stdout);
  return true;
}

std::string ArgParser::help_text() const {
  std::string out = fmt::format("usage: {}\n\n{}\n", usage_, about_);
  if (!about_.empty() && !about_.ends_with('\n')) out += "\n";
  out += "options:\n";
  const auto entry = [&](const std::string& left, const std::string& help) {
    std::string head = "  " + left;
    if (head.size() + 1 > kHelpColumn) {  // a long name: the help starts on the next line
      out += head + "\n";
      head.clear();
    }
    head.resize(kHelpColumn, ' ');
    std::size_t start = 0;
    while (start <= help.size()) {
      const std::size_t nl = std::min(help.find('\n', start), help.size());
      out += (start == 0 ? head : std::string(kHelpColumn, ' ')) + help.substr(start, nl - start) + "\n";
      start = nl + 1;
    }
  };
  for (const auto& s : specs_) {
    std::string help = s.help;
    if (s.default_text && help.find("default") == std::string::npos) {
      help += fmt::format(" (default {})", *s.default_text);
    }
    entry(s.metavar.empty() ? s.name : s.name + " " + s.metavar, help);
  }
  entry("--help", "this text");
  if (!epilog_.empty()) out += "\n" + epilog_ + (epilog_.ends_with('\n') ? "" : "\n");
  return out;
}

}  // namespace cleave::cli
