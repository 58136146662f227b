// OneLine: what an error message may quote of a file's text.
#include "core/one_line.h"

#include <gtest/gtest.h>

#include <string>

namespace kvlearn {
namespace {

TEST(OneLineTest, ControlBytesBecomeQuestionMarksAndUtf8Stays) {
  EXPECT_EQ(OneLine("fc\n0\t\r\x7f!"), "fc?0???!");
  EXPECT_EQ(OneLine(std::string("a\0b", 3)), "a?b");
  EXPECT_EQ(OneLine("sécurité"), "sécurité");
}

TEST(OneLineTest, LongTextIsCutAndSaysSo) {
  EXPECT_EQ(OneLine(std::string(100, 'x')), std::string(100, 'x'));
  EXPECT_EQ(OneLine(std::string(101, 'x')), std::string(100, 'x') + "...");
  EXPECT_EQ(OneLine("abcdef", 3), "abc...");
  EXPECT_EQ(OneLine(""), "");
}

}  // namespace
}  // namespace kvlearn
