#include "sysfs.h"

#include <gtest/gtest.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <regex>

#include "collectors_internal.h"
#include "sysfs_fixture.h"

namespace ibprobe::collectors {
namespace {

using testing::SysfsTree;

TEST(ParseCounter, AcceptsKernelFormat) {
  EXPECT_EQ(parse_counter("0\n"), 0u);
  EXPECT_EQ(parse_counter("4294967295\n"), 4294967295u);
  EXPECT_EQ(parse_counter("18446744073709551615"), 18446744073709551615u);
  EXPECT_EQ(parse_counter("  42 \n"), 42u);
}

TEST(ParseCounter, RejectsWhatIsNotACounter) {
  EXPECT_EQ(parse_counter("N/A (no PMA)\n"), std::unexpected(ReadError::kNoPma));
  EXPECT_EQ(parse_counter(""), std::unexpected(ReadError::kMalformed));
  EXPECT_EQ(parse_counter("-1"), std::unexpected(ReadError::kMalformed));
  EXPECT_EQ(parse_counter("12abc"), std::unexpected(ReadError::kMalformed));
  EXPECT_EQ(parse_counter("0x10"), std::unexpected(ReadError::kMalformed));
  EXPECT_EQ(parse_counter("1 2"), std::unexpected(ReadError::kMalformed));
  EXPECT_EQ(parse_counter("18446744073709551616"), std::unexpected(ReadError::kMalformed));
  EXPECT_FALSE(parse_counter("garbage"));
}

TEST(ClassifyErrno, MapsDriverErrorsToReasons) {
  EXPECT_EQ(classify_errno(ENOENT), ReadError::kNotFound);
  EXPECT_EQ(classify_errno(ENODEV), ReadError::kNotFound);
  EXPECT_EQ(classify_errno(EPERM), ReadError::kPermission);
  EXPECT_EQ(classify_errno(EACCES), ReadError::kPermission);
  EXPECT_EQ(classify_errno(EINVAL), ReadError::kInvalid);
  EXPECT_EQ(classify_errno(EOPNOTSUPP), ReadError::kNotSupported);
  EXPECT_EQ(classify_errno(ENOSYS), ReadError::kNotImplemented);
  EXPECT_EQ(classify_errno(EIO), ReadError::kIo);
  EXPECT_EQ(classify_errno(EISDIR), ReadError::kIo);
  EXPECT_EQ(classify_errno(EMFILE), ReadError::kTooManyOpenFiles);
  EXPECT_EQ(classify_errno(ENFILE), ReadError::kTooManyOpenFiles);
  EXPECT_EQ(to_string(ReadError::kTooManyOpenFiles), "too_many_open_files");
}

TEST(ReadText, ReportsFilesystemFailures) {
  SysfsTree tree;
  tree.write("value", "17");
  EXPECT_EQ(read_text(tree.root() / "value"), "17");
  EXPECT_EQ(read_counter(tree.root() / "value"), 17u);
  EXPECT_EQ(read_text(tree.root() / "missing"), std::unexpected(ReadError::kNotFound));
  std::filesystem::create_symlink(tree.root() / "gone", tree.root() / "dangling");
  EXPECT_EQ(read_text(tree.root() / "dangling"), std::unexpected(ReadError::kNotFound));
  std::filesystem::create_directory(tree.root() / "dir");
  EXPECT_EQ(read_text(tree.root() / "dir"), std::unexpected(ReadError::kIo));
  tree.write("huge", std::string(5000, '1'));
  EXPECT_EQ(read_counter(tree.root() / "huge"), std::unexpected(ReadError::kMalformed));
}

// Root reads everything; dropping the file-system uid (and with it CAP_DAC_OVERRIDE) for this
// thread makes the kernel refuse a mode-000 file, as sysfs does for unprivileged readers.
// (Run unprivileged, the owner is refused the mode-000 file just the same.)
TEST(SysfsDir, FixedAttributeIsReadOncePerTree) {
  SysfsTree tree;
  tree.write("link_layer", "InfiniBand\n");
  const SysfsDir dir(tree.root());
  EXPECT_EQ(dir.read_static_text("link_layer"), "InfiniBand");
  tree.write("link_layer", "Ethernet\n");
  EXPECT_EQ(dir.read_static_text("link_layer"), "InfiniBand");
  EXPECT_EQ(dir.read_text("link_layer"), "Ethernet");
  // A device registered anew is a new tree, which reads the file again.
  EXPECT_EQ(SysfsDir(tree.root()).read_static_text("link_layer"), "Ethernet");
  // A failure is not remembered: the next scrape tries again.
  EXPECT_EQ(dir.read_static_text("node_type"), std::unexpected(ReadError::kNotFound));
  tree.write("node_type", "1: CA\n");
  EXPECT_EQ(dir.read_static_text("node_type"), "1: CA");
}

TEST(ReadText, ReportsPermissionDenied) {
  SysfsTree tree;
  tree.write("secret", "5");
  tree.write("public", "6");
  ASSERT_EQ(::chmod((tree.root() / "secret").c_str(), 0), 0);
  const int previous = ::setfsuid(65534);
  const auto refused = read_text(tree.root() / "secret");
  const auto allowed = read_text(tree.root() / "public");
  ::setfsuid(previous);
  EXPECT_EQ(refused, std::unexpected(ReadError::kPermission));
  EXPECT_EQ(allowed, "6");
}

TEST(ParseRate, ReadsKernelRateStrings) {
  auto hdr = parse_rate("200 Gb/sec (4X HDR)");
  ASSERT_TRUE(hdr);
  EXPECT_DOUBLE_EQ(hdr->gigabits_per_second, 200);
  EXPECT_EQ(hdr->lanes, 4);
  EXPECT_EQ(hdr->speed, "HDR");
  auto sdr = parse_rate("2.5 Gb/sec (1X SDR)");
  ASSERT_TRUE(sdr);
  EXPECT_DOUBLE_EQ(sdr->gigabits_per_second, 2.5);
  EXPECT_EQ(sdr->lanes, 1);
  auto no_speed = parse_rate("10 Gb/sec (4X)");
  ASSERT_TRUE(no_speed);
  EXPECT_EQ(no_speed->lanes, 4);
  EXPECT_EQ(no_speed->speed, "");
  auto bare = parse_rate("25 Gb/sec");
  ASSERT_TRUE(bare);
  EXPECT_EQ(bare->lanes, 0);
  auto ndr = parse_rate("53.125 Gb/sec (1X NDR)");
  ASSERT_TRUE(ndr);
  EXPECT_DOUBLE_EQ(ndr->gigabits_per_second, 53.125);
  EXPECT_FALSE(parse_rate(""));
  EXPECT_FALSE(parse_rate("fast"));
  EXPECT_FALSE(parse_rate("Gb/sec (4X HDR)"));
  EXPECT_FALSE(parse_rate("100 Gb/sec (XX HDR)"));
  EXPECT_FALSE(parse_rate("100 Gb/sec (4X HDR"));
}

TEST(ParseEnumPrefix, ReadsStateFiles) {
  EXPECT_EQ(parse_enum_prefix("4: ACTIVE"), 4);
  EXPECT_EQ(parse_enum_prefix("5: LinkUp"), 5);
  EXPECT_EQ(parse_enum_prefix("1: DOWN"), 1);
  EXPECT_FALSE(parse_enum_prefix("ACTIVE"));
  EXPECT_FALSE(parse_enum_prefix("x: ACTIVE"));
}

TEST(ParseHex, ReadsLids) {
  EXPECT_EQ(parse_hex("0x1"), 1u);
  EXPECT_EQ(parse_hex("0x1a2b"), 0x1a2bu);
  EXPECT_EQ(parse_hex("0x0"), 0u);
  EXPECT_FALSE(parse_hex("0x"));
  EXPECT_FALSE(parse_hex("0xzz"));
}

TEST(SanitizeCounterName, KeepsDriverNamesReadable) {
  EXPECT_EQ(sanitize_counter_name("rx_write_requests"), "rx_write_requests");
  EXPECT_EQ(sanitize_counter_name("DRAM ECC Corr,Bank 0"), "DRAM_ECC_Corr_Bank_0");
  EXPECT_EQ(sanitize_counter_name("tx_wait (vl 0)"), "tx_wait_vl_0");
  EXPECT_EQ(sanitize_counter_name("--"), "_");
}

TEST(DeviceFilter, MatchesWholeNames) {
  DeviceFilter all;
  EXPECT_TRUE(all.accepts("mlx5_0"));
  DeviceFilter only_mlx("mlx5_.*", "");
  EXPECT_TRUE(only_mlx.accepts("mlx5_3"));
  EXPECT_FALSE(only_mlx.accepts("rxe0"));
  EXPECT_FALSE(only_mlx.accepts("xmlx5_0"));
  DeviceFilter no_rxe("", "rxe.*");
  EXPECT_TRUE(no_rxe.accepts("mlx5_0"));
  EXPECT_FALSE(no_rxe.accepts("rxe0"));
  EXPECT_THROW(DeviceFilter("(", ""), std::regex_error);
}

}  // namespace
}  // namespace ibprobe::collectors
