// "did you mean": the subcommand nearest to a mistyped one.
//
//   tocl hots   ->  tocl: unknown command 'hots'; did you mean 'hosts'? (see 'tocl --help')
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace tocl::cli {

// The first word of `args` (argv without argv[0]) that is neither an option
// nor the value of one of `options_with_values` ("--daemon"): the word that
// names the subcommand. nullopt when there is none.
std::optional<std::string_view> CommandWord(std::span<const char* const> args,
                                            std::span<const std::string_view> options_with_values);

// The one command of `commands` that `word` begins ("spawn-t"), else the
// command nearest to `word` by edit distance when it is near enough to be a
// typo (at most a third of the word's length, at least one edit); nullopt
// otherwise.
std::optional<std::string> NearestCommand(std::string_view word,
                                          std::span<const std::string> commands);

}  // namespace tocl::cli
