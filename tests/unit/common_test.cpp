// The shared utilities of common/: enum names read both ways, and the owned descriptor.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/eventfd.h>

#include <cerrno>

#include "ibprobe/enum_names.h"
#include "ibprobe/unique_fd.h"

namespace ibprobe::testing {
namespace {

enum class Colour { kRed, kGreen, kBlue };
constexpr EnumNames<Colour, 2> kColourNames{{{Colour::kRed, "red"}, {Colour::kGreen, "green"}}};

TEST(EnumNames, ReadsTheTableBothWays) {
  EXPECT_EQ(name_of(kColourNames, Colour::kRed), "red");
  EXPECT_EQ(name_of(kColourNames, Colour::kGreen), "green");
  EXPECT_EQ(value_named(kColourNames, "green"), Colour::kGreen);
  EXPECT_EQ(value_named(kColourNames, "red"), Colour::kRed);
}

TEST(EnumNames, AValueOutsideTheTableHasTheFallbackName) {
  EXPECT_EQ(name_of(kColourNames, Colour::kBlue), "unknown");
  EXPECT_EQ(name_of(kColourNames, Colour::kBlue, "other"), "other");
  EXPECT_EQ(name_of(kColourNames, static_cast<Colour>(42)), "unknown");
}

TEST(EnumNames, NamesMatchExactly) {
  EXPECT_FALSE(value_named(kColourNames, "Red"));
  EXPECT_FALSE(value_named(kColourNames, "re"));
  EXPECT_FALSE(value_named(kColourNames, ""));
  EXPECT_FALSE(value_named(kColourNames, "blue"));
}

TEST(EnumNames, ListsTheAcceptedNamesInTableOrder) {
  EXPECT_EQ(names_listed(kColourNames), "red, green");
}

TEST(EnumNames, IsUsableAtCompileTime) {
  static_assert(name_of(kColourNames, Colour::kGreen) == "green");
  static_assert(value_named(kColourNames, "red") == Colour::kRed);
}

bool is_open(int fd) {
  return ::fcntl(fd, F_GETFD) != -1 || errno != EBADF;
}

TEST(UniqueFd, ClosesItsDescriptorWhenItGoes) {
  int fd = -1;
  {
    const UniqueFd owned(::eventfd(0, EFD_CLOEXEC));
    ASSERT_TRUE(owned);
    fd = owned.get();
    EXPECT_TRUE(is_open(fd));
  }
  EXPECT_FALSE(is_open(fd));
}

TEST(UniqueFd, AMoveHandsTheDescriptorOverAndClosesTheOneItReplaces) {
  UniqueFd first(::eventfd(0, EFD_CLOEXEC));
  UniqueFd second(::eventfd(0, EFD_CLOEXEC));
  const int first_fd = first.get(), second_fd = second.get();
  second = std::move(first);
  EXPECT_FALSE(first);
  EXPECT_EQ(second.get(), first_fd);
  EXPECT_TRUE(is_open(first_fd));
  EXPECT_FALSE(is_open(second_fd));
  UniqueFd third(std::move(second));
  EXPECT_FALSE(second);
  EXPECT_EQ(third.get(), first_fd);
}

TEST(UniqueFd, AFailedOpenOwnsNothing) {
  const UniqueFd failed(::open("/nonexistent/ibprobe", O_RDONLY));
  EXPECT_FALSE(failed);
  EXPECT_EQ(failed.get(), -1);
}

}  // namespace
}  // namespace ibprobe::testing
