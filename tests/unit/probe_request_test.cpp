#include "probe_request.h"

#include <gtest/gtest.h>

#include <string>

namespace ibprobe::testing {
namespace {

using exporter::ProbeParams;
using Query = std::map<std::string, std::string>;

Query query_ok(std::string_view text) {
  auto parsed = exporter::parse_query(text);
  if (!parsed) {
    ADD_FAILURE() << "refused '" << text << "': " << parsed.error();
    return {};
  }
  return *parsed;
}

std::string query_error(std::string_view text) {
  auto parsed = exporter::parse_query(text);
  if (parsed) {
    ADD_FAILURE() << "accepted '" << text << "'";
    return "";
  }
  return parsed.error();
}

ProbeParams probe_ok(std::string_view text) {
  auto parsed = exporter::parse_probe_query(text);
  if (!parsed) {
    ADD_FAILURE() << "refused '" << text << "': " << parsed.error();
    return {};
  }
  return parsed.value();
}

std::string probe_error(std::string_view text) {
  auto parsed = exporter::parse_probe_query(text);
  if (parsed.has_value()) {
    ADD_FAILURE() << "accepted '" << text << "'";
    return "";
  }
  return parsed.error();
}

std::string json_error(std::string_view body) {
  auto parsed = exporter::parse_probe_json(body);
  if (parsed.has_value()) {
    ADD_FAILURE() << "accepted " << body;
    return "";
  }
  return parsed.error();
}

TEST(ProbeRequestTest, QueryPairsAndEscapes) {
  EXPECT_TRUE(query_ok("").empty());
  EXPECT_EQ(query_ok("a=1&b=2"), (Query{{"a", "1"}, {"b", "2"}}));
  // application/x-www-form-urlencoded: '+' is a space, %XX a byte, either case of hex.
  EXPECT_EQ(query_ok("q=a+b%20c%2Bd%2b%3D%26"), (Query{{"q", "a b c+d+=&"}}));
  EXPECT_EQ(query_ok("t=%5Bfd00%3A%3A1%5D%3A9471"), (Query{{"t", "[fd00::1]:9471"}}));
  EXPECT_EQ(query_ok("%74arget=x"), (Query{{"target", "x"}}));
  EXPECT_EQ(query_ok("flag"), (Query{{"flag", ""}}));
  EXPECT_EQ(query_ok("a=&b="), (Query{{"a", ""}, {"b", ""}}));
  EXPECT_EQ(query_ok("a=x=y"), (Query{{"a", "x=y"}}));
  EXPECT_EQ(query_ok("&&a=1&&"), (Query{{"a", "1"}}));
  EXPECT_EQ(query_ok("a=%C3%A9"), (Query{{"a", "\xC3\xA9"}}));
}

TEST(ProbeRequestTest, MalformedEscapes) {
  for (const auto* bad : {"a=%", "a=%4", "a=%G1", "a=%1G", "a=%%41", "%=1", "a=1%2", "a=%-1"}) {
    EXPECT_NE(query_error(bad).find("%-escape"), std::string::npos) << bad;
  }
}

TEST(ProbeRequestTest, NamesMustBePresentAndUnique) {
  EXPECT_NE(query_error("=x").find("without a name"), std::string::npos);
  EXPECT_NE(query_error("a=1&=2").find("without a name"), std::string::npos);
  EXPECT_NE(query_error("a=1&a=1").find("'a' is given more than once"), std::string::npos);
  // The same name once encoded, once not, is still the same parameter.
  EXPECT_NE(query_error("target=a&%74arget=b").find("'target'"), std::string::npos);
  EXPECT_NE(query_error("a+b=1&a%20b=2").find("more than once"), std::string::npos);
}

TEST(ProbeRequestTest, QuerySizeBounds) {
  std::string sixteen, seventeen;
  for (int i = 0; i < 17; ++i) {
    (i < 16 ? sixteen : seventeen) += (i % 16 ? "&p" : "p") + std::to_string(i) + "=v";
  }
  seventeen = sixteen + "&" + seventeen;
  EXPECT_EQ(query_ok(sixteen).size(), 16u);
  EXPECT_NE(query_error(seventeen).find("more than 16"), std::string::npos);

  const std::string prefix = "a=";
  const std::string at_limit = prefix + std::string(4096 - prefix.size(), 'x');
  EXPECT_EQ(query_ok(at_limit).at("a").size(), 4094u);
  EXPECT_NE(query_error(at_limit + "x").find("longer than 4096"), std::string::npos);
}

TEST(ProbeRequestTest, ProbeQuery) {
  const auto params = probe_ok("target=10.0.0.2%3A9471&module=write_bw");
  EXPECT_EQ(params.target, "10.0.0.2:9471");
  EXPECT_EQ(params.module, "write_bw");
  EXPECT_FALSE(params.debug);
  EXPECT_FALSE(params.timeout_seconds);
  // Order does not matter; a colon needs no escaping in a query.
  const auto swapped = probe_ok("module=read_lat&debug=true&target=[fd00::1]:9000&timeout=5s");
  EXPECT_EQ(swapped.target, "[fd00::1]:9000");
  EXPECT_EQ(swapped.module, "read_lat");
  EXPECT_TRUE(swapped.debug);
  EXPECT_EQ(swapped.timeout_seconds, std::optional<double>(5));
  EXPECT_FALSE(probe_ok("target=h&module=m&debug=false").debug);
  EXPECT_EQ(probe_ok("target=h&module=m&timeout=2500ms").timeout_seconds,
            std::optional<double>(2.5));
}

TEST(ProbeRequestTest, TheLaneInTheQueryAndTheBody) {
  const auto params = probe_ok("target=h&module=m&sl=3&traffic_class=106&pkey_index=1&dlid=4660");
  EXPECT_EQ(params.dlid, std::optional<std::uint32_t>(4660));
  EXPECT_EQ(params.sl, std::optional<std::uint32_t>(3));
  EXPECT_EQ(params.traffic_class, std::optional<std::uint32_t>(106));
  EXPECT_EQ(params.pkey_index, std::optional<std::uint32_t>(1));
  EXPECT_TRUE(params.has_lane());
  EXPECT_FALSE(probe_ok("target=h&module=m").has_lane());
  // Ranges are the spec's to check: a number out of range parses, and is refused with the run.
  EXPECT_EQ(probe_ok("target=h&module=m&sl=16").sl, std::optional<std::uint32_t>(16));
  for (const auto* bad : {"x", "-1", "1.5", "", " 3", "99999999999"}) {
    EXPECT_EQ(probe_error(std::string("target=h&module=m&sl=") + bad),
              std::string("sl '") + bad + "' is not a whole number")
        << bad;
  }
  EXPECT_EQ(probe_error("target=h&module=m&traffic_class=0x6a"),
            "traffic_class '0x6a' is not a whole number");
  const auto body = exporter::parse_probe_json(
      R"({"target":"h","module":"m","sl":2,"traffic_class":106,"pkey_index":0,"dlid":18})");
  ASSERT_TRUE(body.has_value()) << body.error();
  EXPECT_EQ(body->sl, std::optional<std::uint32_t>(2));
  EXPECT_EQ(body->traffic_class, std::optional<std::uint32_t>(106));
  EXPECT_EQ(body->pkey_index, std::optional<std::uint32_t>(0));
  EXPECT_EQ(body->dlid, std::optional<std::uint32_t>(18));
  EXPECT_TRUE(probe_ok("target=h&module=m&dlid=1").has_lane());
  for (const auto* bad : {"-1", "1.5", "\"3\"", "null", "4294967296"}) {
    EXPECT_EQ(json_error(std::string(R"({"target":"h","module":"m","pkey_index":)") + bad + "}"),
              "pkey_index must be a whole number")
        << bad;
  }
}

TEST(ProbeRequestTest, ProbeQueryRefusals) {
  EXPECT_NE(probe_error("module=m").find("target is missing"), std::string::npos);
  EXPECT_NE(probe_error("target=&module=m").find("target is missing"), std::string::npos);
  EXPECT_NE(probe_error("target=h").find("module is missing"), std::string::npos);
  EXPECT_NE(probe_error("").find("missing"), std::string::npos);
  EXPECT_NE(probe_error("target=h&module=m&debug=1").find("debug must be true or false"),
            std::string::npos);
  EXPECT_NE(probe_error("target=h&module=m&debug=TRUE").find("debug"), std::string::npos);
  for (const auto* timeout : {"-1", "soon", "5h", "inf", "nan", "1s5", ""}) {
    EXPECT_NE(
        probe_error(std::string("target=h&module=m&timeout=") + timeout).find("is not a duration"),
        std::string::npos)
        << timeout;
  }
  // blackbox_exporter's other parameters are not ours: refused, not ignored.
  const auto unknown = probe_error("target=h&module=m&hostname=x");
  EXPECT_NE(unknown.find("unknown parameter 'hostname'"), std::string::npos) << unknown;
  EXPECT_NE(probe_error("target=h&module=m&target=g").find("more than once"), std::string::npos);
}

TEST(ProbeRequestTest, ControlCharactersAndLongValues) {
  for (const auto* bad : {"%00", "%0A", "%0D", "%09", "%1F", "%7F"}) {
    EXPECT_NE(probe_error(std::string("target=h") + bad + "&module=m").find("control characters"),
              std::string::npos)
        << bad;
    EXPECT_NE(probe_error(std::string("target=h&module=m") + bad).find("control characters"),
              std::string::npos)
        << bad;
  }
  // Printable bytes above ASCII are the target's business (the scheduler checks host syntax).
  EXPECT_EQ(probe_ok("target=h%C3%A9&module=m").target, "h\xC3\xA9");
  const std::string long_value(513, 'a');
  EXPECT_NE(probe_error("target=" + long_value + "&module=m").find("longer than 512"),
            std::string::npos);
  EXPECT_EQ(probe_ok("target=h&module=" + std::string(512, 'm')).module.size(), 512u);
}

TEST(ProbeRequestTest, WaitDurations) {
  using exporter::parse_wait_seconds;
  EXPECT_EQ(parse_wait_seconds("30s"), std::optional<double>(30));
  EXPECT_EQ(parse_wait_seconds("30"), std::optional<double>(30));
  EXPECT_EQ(parse_wait_seconds("0"), std::optional<double>(0));
  EXPECT_EQ(parse_wait_seconds("2m"), std::optional<double>(120));
  EXPECT_EQ(parse_wait_seconds("1.5"), std::optional<double>(1.5));
  ASSERT_TRUE(parse_wait_seconds("500ms"));
  EXPECT_DOUBLE_EQ(*parse_wait_seconds("500ms"), 0.5);
  for (const auto* bad : {"", "s", "ms", "m", "-1s", "1h", "1 s", " 1", "1s ", "0x10", "inf", "nan",
                          "1e999", "5sec", "ms5"}) {
    EXPECT_FALSE(parse_wait_seconds(bad)) << bad;
  }
}

TEST(ProbeRequestTest, JsonBody) {
  const auto parsed = exporter::parse_probe_json(
      R"({"target": "h:1", "module": "send_bw", "timeout_seconds": 12.5})");
  ASSERT_TRUE(parsed.has_value()) << parsed.error();
  const auto& params = parsed.value();
  EXPECT_EQ(params.target, "h:1");
  EXPECT_EQ(params.module, "send_bw");
  EXPECT_EQ(params.timeout_seconds, std::optional<double>(12.5));
  EXPECT_FALSE(params.debug);
  const auto minimal = exporter::parse_probe_json(R"({"module":"m","target":"h"})");
  ASSERT_TRUE(minimal.has_value());
  EXPECT_FALSE(minimal.value().timeout_seconds);
  // An integer is a number too.
  const auto whole =
      exporter::parse_probe_json(R"({"module":"m","target":"h","timeout_seconds":7})");
  ASSERT_TRUE(whole.has_value());
  EXPECT_EQ(whole.value().timeout_seconds, std::optional<double>(7));
}

TEST(ProbeRequestTest, JsonRefusals) {
  EXPECT_NE(json_error("").find("not valid JSON"), std::string::npos);
  EXPECT_NE(json_error("{\"target\":").find("not valid JSON"), std::string::npos);
  EXPECT_NE(json_error("{'target': 'h'}").find("not valid JSON"), std::string::npos);
  EXPECT_NE(json_error(R"({"target":"h","module":"m"} trailing)").find("not valid JSON"),
            std::string::npos);
  for (const auto* body : {"[]", "\"h\"", "42", "null"}) {
    EXPECT_NE(json_error(body).find("must be a JSON object"), std::string::npos) << body;
  }
  EXPECT_NE(json_error(R"({"target":1,"module":"m"})").find("target must be a string"),
            std::string::npos);
  EXPECT_NE(json_error(R"({"target":"h","module":null})").find("module must be a string"),
            std::string::npos);
  EXPECT_NE(json_error(R"({"target":["h"],"module":"m"})").find("target must be a string"),
            std::string::npos);
  for (const auto* timeout : {"\"5s\"", "-1", "true", "null", "{}"}) {
    EXPECT_NE(
        json_error(std::string(R"({"target":"h","module":"m","timeout_seconds":)") + timeout + "}")
            .find("timeout_seconds must be a non-negative number"),
        std::string::npos)
        << timeout;
  }
  // A number too large for a double does not parse at all.
  EXPECT_FALSE(exporter::parse_probe_json(R"({"target":"h","module":"m","timeout_seconds":1e999})")
                   .has_value());
  EXPECT_NE(json_error(R"({"target":"h","module":"m","debug":true})").find("unknown field 'debug'"),
            std::string::npos);
  EXPECT_NE(json_error(R"({"module":"m"})").find("target is missing"), std::string::npos);
  EXPECT_NE(json_error(R"({"target":"h","module":""})").find("module is missing"),
            std::string::npos);
  EXPECT_NE(json_error(R"({"target":"h\n","module":"m"})").find("control characters"),
            std::string::npos);
  EXPECT_NE(json_error(R"({"target":"h","module":"m\u0000"})").find("control characters"),
            std::string::npos);
}

// As with the query string, a repeated field is refused rather than one of them being used.
TEST(ProbeRequestTest, JsonRepeatedFields) {
  EXPECT_NE(json_error(R"({"target":"a","module":"m","target":"b"})")
                .find("field 'target' is given more than once"),
            std::string::npos);
  // Only the top level counts: an inner object is refused for being unknown, not for repeating.
  EXPECT_NE(
      json_error(R"({"target":"a","module":"m","x":{"target":"b"}})").find("unknown field 'x'"),
      std::string::npos);
}

TEST(ProbeRequestTest, JsonBodySize) {
  const std::string head = R"({"module":"m","target":")";
  const std::string tail = "\"}";
  // Padding with spaces keeps the body valid while growing it to the bound.
  auto body_of = [&](std::size_t size) {
    std::string body = head + "h" + tail;
    body.insert(1, size - body.size(), ' ');
    return body;
  };
  const auto at_limit = exporter::parse_probe_json(body_of(16 * 1024));
  EXPECT_TRUE(at_limit.has_value());
  EXPECT_NE(json_error(body_of(16 * 1024 + 1)).find("longer than 16384"), std::string::npos);
}

}  // namespace
}  // namespace ibprobe::testing
