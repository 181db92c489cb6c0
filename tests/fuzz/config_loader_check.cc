// toclsd's configuration loader (toclsd/config.h) on arbitrary TOML: no
// exception escapes (toml++ throws; the loader turns every failure into a
// Status), a refused file changes nothing, and an accepted configuration
// printed by ConfigToToml loads again to the same configuration. Nothing
// here names a setting, so settings can be added without touching it.
#include <exception>
#include <string>
#include <utility>

#include "check_support.h"
#include "config.h"
#include "fuzz_checks.h"

namespace tocl::fuzz {
namespace {

using daemon::ConfigToToml;
using daemon::DaemonConfig;
using daemon::FinishConfig;
using daemon::LoadConfigText;

// Runs `step` into `out`; an exception escaping it is a broken property.
template <typename T, typename Step>
Status NoThrow(std::string_view what, Step step, T& out) {
  try {
    out = step();
    return Status::Ok();
  } catch (const std::exception& error) {
    return Internal(fmt::format("property broken: {} threw: {}", what, error.what()));
  } catch (...) {
    return Internal(fmt::format("property broken: {} threw something", what));
  }
}

Status Load(std::string_view toml, std::string_view source, DaemonConfig& config, Status& out) {
  return NoThrow(
      "LoadConfigText", [&] { return LoadConfigText(toml, source, config); }, out);
}
Status Finish(DaemonConfig& config, Status& out) {
  return NoThrow(
      "FinishConfig", [&] { return FinishConfig(config); }, out);
}
Status Print(const DaemonConfig& config, std::string& out) {
  return NoThrow(
      "ConfigToToml", [&] { return ConfigToToml(config); }, out);
}

}  // namespace

Result<Verdict> CheckConfigLoader(std::span<const std::byte> input) {
  const std::string_view text = AsText(input);
  DaemonConfig config;
  std::string defaults;
  TOCL_RETURN_IF_ERROR(Print(config, defaults));
  Status loaded;
  TOCL_RETURN_IF_ERROR(Load(text, "fuzz.toml", config, loaded));
  if (!loaded.ok()) {
    TOCL_FUZZ_EXPECT(loaded.code() == StatusCode::kInvalidArgument && !loaded.message().empty(),
                     "{}", Escaped(loaded.ToString()));
    // "Read into a copy: a file with an error changes nothing."
    std::string after;
    TOCL_RETURN_IF_ERROR(Print(config, after));
    TOCL_FUZZ_EXPECT(after == defaults, "refused ({}) but changed to:\n{}", loaded.message(),
                     after);
    return Verdict::kRejected;
  }
  Status finished;
  TOCL_RETURN_IF_ERROR(Finish(config, finished));
  if (!finished.ok()) {
    TOCL_FUZZ_EXPECT(!finished.message().empty(), "{}", finished.ToString());
    return Verdict::kRejected;
  }

  // What --print-config shows is a configuration file that means the same.
  std::string printed;
  TOCL_RETURN_IF_ERROR(Print(config, printed));
  DaemonConfig reloaded;
  Status again;
  TOCL_RETURN_IF_ERROR(Load(printed, "printed.toml", reloaded, again));
  TOCL_FUZZ_EXPECT(again.ok(), "{}\nprinted:\n{}", Escaped(again.message()), printed);
  TOCL_RETURN_IF_ERROR(Finish(reloaded, again));
  TOCL_FUZZ_EXPECT(again.ok(), "{}\nprinted:\n{}", Escaped(again.message()), printed);
  std::string reprinted;
  TOCL_RETURN_IF_ERROR(Print(reloaded, reprinted));
  TOCL_FUZZ_EXPECT(reprinted == printed, "printed:\n{}\nreloaded and printed:\n{}", printed,
                   reprinted);

  // Finishing twice changes nothing (toclsd finishes once, after the flags).
  Status twice;
  TOCL_RETURN_IF_ERROR(Finish(config, twice));
  TOCL_FUZZ_EXPECT(twice.ok(), "{}", twice.ToString());
  std::string printed_twice;
  TOCL_RETURN_IF_ERROR(Print(config, printed_twice));
  TOCL_FUZZ_EXPECT(printed_twice == printed, "finished once:\n{}\nfinished twice:\n{}", printed,
                   printed_twice);
  return Verdict::kAccepted;
}

}  // namespace tocl::fuzz
