#include <CLI/CLI.hpp>
#include <charconv>
#include <iostream>
#include <stdexcept>

#include "ibprobe/exporter.h"

namespace ibprobe::exporter {
namespace {

bool valid_port(std::string_view port) {
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  return ec == std::errc() && end == port.data() + port.size() && value <= 65535;
}

}  // namespace

std::string civetweb_listening_port(const std::string& listen_address) {
  const auto colon = listen_address.rfind(':');
  if (colon == std::string::npos) {
    throw std::invalid_argument("listen address '" + listen_address +
                                "' has no port: use HOST:PORT or :PORT");
  }
  const std::string host = listen_address.substr(0, colon);
  const std::string port = listen_address.substr(colon + 1);
  if (!valid_port(port)) {
    throw std::invalid_argument("listen address '" + listen_address +
                                "': port must be a number from 0 to 65535 (0: any free port)");
  }
  if (host.empty()) return port;
  if (host.front() == '[' && host.back() != ']') {
    throw std::invalid_argument("listen address '" + listen_address +
                                "': unterminated IPv6 bracket");
  }
  if (host.front() != '[' && host.find(':') != std::string::npos) {
    throw std::invalid_argument("listen address '" + listen_address +
                                "': write IPv6 hosts in brackets, e.g. [::1]:9470");
  }
  return host + ":" + port;
}

std::optional<int> parse_flags(int argc, const char* const argv[], Config& config) {
  CLI::App app{"ibprobe_exporter: Prometheus exporter for InfiniBand and RoCE ports",
               "ibprobe_exporter"};
  app.get_formatter()->column_width(44);
  bool show_version = false;
  app.add_flag("--version", show_version, "Print the version and exit");
  app.add_option("--web.listen-address", config.listen_address,
                 "Address to listen on for HTTP requests")
      ->capture_default_str();
  app.add_option("--web.telemetry-path", config.telemetry_path,
                 "Path under which metrics are served")
      ->capture_default_str()
      ->check([](const std::string& path) {
        return path.starts_with("/") ? std::string() : std::string("must start with /");
      });
  app.add_option("--web.threads", config.http_threads, "HTTP worker threads")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  app.add_option("--scrape.parallelism", config.scrape_parallelism,
                 "Devices collected concurrently during one scrape")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  app.add_option("--path.sysfs", config.sysfs_root, "sysfs mount point")->capture_default_str();
  app.add_option("--device.include", config.device_include,
                 "Regular expression of RDMA device names to export (whole name)");
  app.add_option("--device.exclude", config.device_exclude,
                 "Regular expression of RDMA device names to leave out (whole name)");
  app.add_option("--log.level", config.log_level, "Minimum log level")
      ->capture_default_str()
      ->check(CLI::IsMember({"debug", "info", "warn", "error"}));

  const auto& infos = collectors::available_collectors();
  std::vector<int> enabled(infos.size());
  for (std::size_t i = 0; i < infos.size(); ++i) {
    const std::string name(infos[i].name);
    app.add_flag("--collector." + name + ",!--no-collector." + name, enabled[i],
                 "Enable the " + name + " collector: " + std::string(infos[i].description) +
                     (infos[i].enabled_by_default ? " (default: on)" : " (default: off)"));
    // CLI11 zeroes a counting flag when it is added: the default goes in afterwards.
    enabled[i] = infos[i].enabled_by_default ? 1 : 0;
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (show_version) {
    std::cout << "ibprobe_exporter " << kVersion << " (revision " << kRevision << ")\n";
    return 0;
  }
  try {
    civetweb_listening_port(config.listen_address);
    collectors::DeviceFilter(config.device_include, config.device_exclude);
  } catch (const std::regex_error& e) {
    std::cerr << "ibprobe_exporter: invalid --device.include/--device.exclude regular expression: "
              << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "ibprobe_exporter: " << e.what() << "\n";
    return 2;
  }
  config.enabled_collectors.clear();
  for (std::size_t i = 0; i < infos.size(); ++i) {
    if (enabled[i] > 0) config.enabled_collectors.emplace_back(infos[i].name);
  }
  return std::nullopt;
}

}  // namespace ibprobe::exporter
