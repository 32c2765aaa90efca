// Links in README.md, docs/*.md and benchmarks/*/RESULTS.md: every link is relative, resolves to a file or
// folder that exists, and stays inside the repository (no ../shared, no absolute path, no URL).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "unit/docs/markdown_table.hpp"

namespace cleave::docs_test::links_test {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> pages(const fs::path& root) {
  std::vector<fs::path> found = {root / "README.md"};
  for (const auto& entry : fs::directory_iterator(root / "docs")) {
    if (entry.path().extension() == ".md") found.push_back(entry.path());
  }
  for (const auto& entry : fs::directory_iterator(root / "benchmarks")) {
    if (fs::exists(entry.path() / "RESULTS.md")) found.push_back(entry.path() / "RESULTS.md");
  }
  return found;
}

// Whether `path` (normalised) lies under `root`.
bool inside(const fs::path& root, const fs::path& path) {
  const auto rel = path.lexically_normal().lexically_relative(root.lexically_normal());
  return !rel.empty() && *rel.begin() != "..";
}

TEST(DocLinks, EveryLinkResolvesInsideTheRepository) {
  const fs::path root = fs::path(CLEAVE_SOURCE_DIR).lexically_normal();
  int checked = 0;
  for (const auto& page : pages(root)) {
    const std::string name = page.lexically_relative(root).string();
    for (const auto& link : links_in(read_text(page))) {
      const std::string where = name + ":" + std::to_string(link.line) + ": link " + link.target;
      if (link.target.rfind('#', 0) == 0) continue;  // an anchor on the same page
      EXPECT_EQ(link.target.find("://"), std::string::npos) << where << " leaves the repository (a URL)";
      EXPECT_NE(link.target.rfind("mailto:", 0), 0u) << where << " leaves the repository";
      if (link.target.find("://") != std::string::npos || link.target.rfind("mailto:", 0) == 0) continue;
      EXPECT_NE(link.target.front(), '/') << where << " is absolute; write it relative to the page";
      const fs::path target = page.parent_path() / link.target.substr(0, link.target.find('#'));
      EXPECT_TRUE(inside(root, target)) << where << " points outside the repository";
      EXPECT_TRUE(fs::exists(target)) << where << " names " << target.lexically_normal() << ", which does not exist";
      ++checked;
    }
  }
  EXPECT_GT(checked, 10) << "too few links found to believe the pages were read";
}

TEST(DocLinks, TheReaderFindsLinksAndSkipsCode) {
  const auto links = links_in("see [a](docs/a.md) and `[b](no.md)`\n```\n[c](no.md)\n```\n[d]: ../x.md\n");
  ASSERT_EQ(links.size(), 2u);
  EXPECT_EQ(links[0].target, "docs/a.md");
  EXPECT_EQ(links[1].target, "../x.md");
  EXPECT_EQ(links[1].line, 5);
}

TEST(DocLinks, InsideRejectsEscapes) {
  EXPECT_TRUE(inside("/r", "/r/docs/../README.md"));
  EXPECT_FALSE(inside("/r", "/r/../shared/DESIGN.md"));
  EXPECT_FALSE(inside("/r", "/r/.."));
}

}  // namespace
}  // namespace cleave::docs_test::links_test
