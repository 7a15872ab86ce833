// The recent-runs page as a browser shows it: rendered, loaded in Debian's headless Chromium,
// and read back from the DOM the browser built.
#include "runs_page.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <string>

namespace ibprobe::testing {
namespace {

using exporter::ProbeRun;
using exporter::RunState;
using ::testing::HasSubstr;
using ::testing::Not;

std::vector<ProbeRun> two_runs() {
  ProbeRun failed;
  failed.id = 8;
  failed.target = "10.99.0.1:9471";
  failed.module = "write_bw";
  failed.state = RunState::kFailed;
  failed.duration_seconds = 2.5;
  failed.failure_reason = "unreachable";
  failed.failure = "cannot connect to 10.99.0.1:9471: Connection refused";
  failed.trigger = exporter::AlertTrigger{"IbprobeProbeFailing",
                                          "4f2a9c01",
                                          "2026-12-05T06:00:00Z",
                                          {{"alertname", "IbprobeProbeFailing"}}};
  ProbeRun healthy;
  healthy.id = 7;
  healthy.target = "<script>document.title='owned'</script>:9471";
  healthy.module = "write_lat";
  healthy.state = RunState::kSucceeded;
  healthy.duration_seconds = 0.25;
  probes::ProbeOutcome outcome;
  probes::LatencyStats latency;
  latency.typical_ns = 2110;
  outcome.latency = latency;
  outcome.link.diagnosis = probes::Diagnosis::kInconclusive;
  healthy.outcome = outcome;
  return {failed, healthy};
}

// The DOM Chromium built from `html`, serialized (--dump-dom).
std::string dom_in_chromium(const std::string& html) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("runs_page_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto page = dir / "probes.html";
  std::ofstream(page) << html;
  const std::string command = "chromium --headless --no-sandbox --disable-gpu --user-data-dir=" +
                              (dir / "profile").string() + " --dump-dom file://" + page.string() +
                              " 2>" + (dir / "chromium.log").string();
  std::string dom;
  {
    const std::unique_ptr<FILE, decltype(&::pclose)> pipe(::popen(command.c_str(), "r"), ::pclose);
    if (!pipe) return {};
    std::array<char, 4096> buffer{};
    for (std::size_t n; (n = std::fread(buffer.data(), 1, buffer.size(), pipe.get())) > 0;) {
      dom.append(buffer.data(), n);
    }
  }
  std::filesystem::remove_all(dir);
  return dom;
}

// The text of each cell of row `id`, in order, as the browser parsed them.
std::vector<std::string> cells(const std::string& dom, const std::string& id) {
  const std::regex row("<tr id=\"" + id + "\"[^>]*>([\\s\\S]*?)</tr>");
  std::smatch found;
  if (!std::regex_search(dom, found, row)) return {};
  const std::string inside = found[1];
  std::vector<std::string> out;
  const std::regex cell("<td class=\"[a-z]+\">([\\s\\S]*?)</td>");
  for (auto it = std::sregex_iterator(inside.begin(), inside.end(), cell);
       it != std::sregex_iterator(); ++it) {
    out.push_back(std::regex_replace((*it)[1].str(), std::regex("<[^>]+>"), ""));
  }
  return out;
}

TEST(RunsPage, AFailedAndASuccessfulRunAsTheBrowserShowsThem) {
  const std::string dom = dom_in_chromium(exporter::render_runs_page(two_runs()));
  ASSERT_THAT(dom, HasSubstr("<table id=\"runs\">"))
      << "chromium rendered no page (scripts/install-deps.sh installs chromium): " << dom;
  // Run, submitted, trigger, module, target, state, verdict, failure, duration.
  const auto failed = cells(dom, "run-8");
  ASSERT_EQ(failed.size(), 9u) << dom;
  EXPECT_EQ(failed[0], "8");
  EXPECT_EQ(failed[2], "IbprobeProbeFailing 4f2a9c01");
  EXPECT_EQ(failed[3], "write_bw");
  EXPECT_EQ(failed[5], "failed");
  EXPECT_EQ(failed[6], "failed: unreachable");
  EXPECT_EQ(failed[7], "cannot connect to 10.99.0.1:9471: Connection refused");
  EXPECT_EQ(failed[8], "2.500 s");
  const auto healthy = cells(dom, "run-7");
  ASSERT_EQ(healthy.size(), 9u);
  EXPECT_EQ(healthy[2], "—");
  EXPECT_EQ(healthy[5], "succeeded");
  EXPECT_EQ(healthy[6], "succeeded, t_typical 2.11 us, inconclusive");
  EXPECT_EQ(healthy[7], "");
  // A target holding markup is text on the page, never a script the browser ran.
  EXPECT_EQ(healthy[4], "&lt;script&gt;document.title='owned'&lt;/script&gt;:9471");
  EXPECT_THAT(dom, Not(HasSubstr("<title>owned</title>")));
  EXPECT_THAT(dom, HasSubstr("href=\"/api/v1/probes/8\""));
}

}  // namespace
}  // namespace ibprobe::testing
