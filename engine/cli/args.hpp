// The `cleave` commands' argument parser: each command declares its options (name, kind, default, help) and
// positional arguments once; parse() reads argv against the declarations and --help is written from them.
//
// Invariants: a value is parsed once, here, by its declared kind (whole numbers, numbers, byte sizes with
// units as in 96MiB, comma-separated lists of whole numbers), so a command reads typed values; every
// refusal is an Error naming the command and the option, and an unknown option lists the known ones (with
// a did-you-mean where one is close). `--name value` and `--name=value` are the same; a switch takes no
// value; a value may start with '-' (a negative number is refused by its kind's minimum, not taken for an
// option). Reading an option that was never declared is a bug (CLEAVE_ASSERT).
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/core/edit_distance.hpp"

namespace cleave::cli {

enum class ArgKind {
  kSwitch,     // present or not
  kText,       // one string (the last one given)
  kCount,      // a whole number within [min, max]
  kNumber,     // a finite number >= min
  kSize,       // bytes: 1048576, 96MiB, 2GB (core/allocator.hpp parse_bytes)
  kCountList,  // comma-separated whole numbers >= min, sorted, duplicates removed
  kRepeated,   // a string each time it is given, in order (e.g. --set key=value)
};

struct ArgSpec {
  std::string name;     // "--steps"
  ArgKind kind = ArgKind::kSwitch;
  std::string metavar;  // "N", shown in --help
  std::string help;     // lines separated by '\n'
  std::optional<std::string> default_text;  // shown in --help as "(default X)" and used when not given
  std::int64_t min = 0;                      // kCount, kNumber, kCountList
  std::int64_t max = std::numeric_limits<std::int32_t>::max();  // kCount, kCountList
};

// The values of one command line. Accessors take the option's declared name ("--steps").
class Args {
 public:
  bool help() const { return help_; }
  bool given(std::string_view name) const;
  bool on(std::string_view name) const;  // a switch
  std::string text(std::string_view name) const;  // "" when neither given nor defaulted
  std::int64_t count(std::string_view name) const;
  double number(std::string_view name) const;
  std::optional<std::int64_t> size(std::string_view name) const;  // nullopt when not given
  std::vector<std::int64_t> counts(std::string_view name) const;
  std::vector<std::string> all(std::string_view name) const;  // kRepeated
  // Positional arguments, in order; at most as many as declared.
  const std::vector<std::string>& positionals() const { return positionals_; }
  std::string positional(std::size_t i) const { return i < positionals_.size() ? positionals_[i] : std::string(); }

 private:
  friend class ArgParser;
  struct Value {
    ArgKind kind = ArgKind::kSwitch;
    bool given = false;
    std::vector<std::string> texts;   // raw, as given (or the default)
    std::vector<std::int64_t> ints;   // kCount (one), kSize (one), kCountList
    double number = 0;                // kNumber
  };
  const Value& value(std::string_view name, ArgKind kind) const;
  bool help_ = false;
  std::map<std::string, Value, std::less<>> values_;
  std::vector<std::string> positionals_;
};

class ArgParser {
 public:
  // `command`: "train" (messages say "train: ..."); `usage`: the synopsis after "usage: "; `about`: the
  // paragraph under it.
  ArgParser(std::string command, std::string usage, std::string about);

  ArgParser& flag(std::string name, std::string help);
  ArgParser& text(std::string name, std::string metavar, std::string help,
                  std::optional<std::string> default_text = std::nullopt);
  ArgParser& count(std::string name, std::string metavar, std::string help, std::optional<std::int64_t> default_value,
                   std::int64_t min = 1, std::int64_t max = std::numeric_limits<std::int32_t>::max());
  ArgParser& number(std::string name, std::string metavar, std::string help, std::optional<double> default_value,
                    double min = 0);
  ArgParser& size(std::string name, std::string metavar, std::string help);
  ArgParser& count_list(std::string name, std::string metavar, std::string help, std::int64_t min = 1);
  ArgParser& repeated(std::string name, std::string metavar, std::string help);
  // --set key.path=value, repeated: the config overrides every config-reading command takes.
  ArgParser& config_overrides();
  // A positional argument ("CONFIG", "config file"): `what` names it in messages. Declared in order.
  ArgParser& positional(std::string metavar, std::string what);
  // The last positional argument, repeated: any number of them ("TEXT_FILES...", "text file").
  ArgParser& positionals(std::string metavar, std::string what);
  // Text after the options in --help (examples, notes).
  ArgParser& epilog(std::string text);

  // argv[0] is the command's name and is skipped. Throws InputError (engine/core/input_error.hpp: `cleave` exits
  // ExitCode::kBadInput) on an unknown option, a missing or malformed value, or more positional arguments than
  // declared. --help / -h sets Args::help() and stops reading.
  Args parse(int argc, char** argv) const;
  Args parse(const std::vector<std::string>& args) const;

  std::string help_text() const;
  // A command's entry point, after parse(): when `args` asked for --help / -h, writes help_text() to stdout and
  // returns true (the command then returns 0 and reads nothing further); false otherwise.
  bool print_help_if_asked(const Args& args) const;
  const std::string& command() const { return command_; }

 private:
  ArgParser& add(ArgSpec spec);
  Args read_words(const std::vector<std::string>& args) const;  // parse(), throwing plain Errors
  const ArgSpec* find(std::string_view name) const;
  std::string known_options() const;
  void read_value(const ArgSpec& spec, const std::string& text, Args::Value& value) const;

  std::string command_, usage_, about_, epilog_;
  std::vector<ArgSpec> specs_;
  std::vector<std::pair<std::string, std::string>> positionals_;  // metavar, what
  bool last_repeats_ = false;  // positionals(): the last one takes any number of arguments
};

// The closest of `candidates` to `word` by edit distance, if close enough to be a likely typo; "" otherwise
// (engine/core/edit_distance.hpp).
using cleave::closest_spelling;

}  // namespace cleave::cli
