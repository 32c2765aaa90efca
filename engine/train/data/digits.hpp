// The handwritten digits set (UCI optdigits test set as scikit-learn ships it, digits.csv.gz): 1797 rows
// of 64 pixel values 0..16 (an 8×8 image, row-major) and a label 0..9.
//
// Invariant: a DigitsData holds only checked rows: 65 integers each, pixels in 0..16 (stored scaled to
// [0, 1]), labels in 0..9. Reading a .gz file runs `gzip -dc` (no zlib dependency) and checks its exit
// status; any other name is read as plain CSV.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/train/data/data_source.hpp"

namespace cleave::train {

struct DigitsData {
  static constexpr std::int64_t kPixels = 64;
  static constexpr std::int64_t kClasses = 10;
  std::string path;
  std::vector<float> pixels;          // rows × 64, in [0, 1]
  std::vector<std::int32_t> labels;   // rows
  std::int64_t rows() const { return static_cast<std::int64_t>(labels.size()); }
};

DigitsData read_digits(const std::string& path);

// Rows [begin, end) of the set, as [64] (mlp) or [1, 8, 8] (cnn) f32 inputs and i32 labels.
class DigitsSource final : public DataSource {
 public:
  DigitsSource(std::shared_ptr<const DigitsData> data, std::int64_t begin, std::int64_t end, bool image_shape,
               std::uint64_t seed, Split split);

  std::string describe() const override;
  Shape sample_shape() const override { return image_ ? Shape{1, 8, 8} : Shape{DigitsData::kPixels}; }
  DType input_dtype() const override { return DType::kF32; }
  Shape target_shape() const override { return Shape{}; }
  std::int64_t size() const override { return end_ - begin_; }

 private:
  void write_sample(std::uint64_t id, void* input, std::int32_t* target) const override;

  std::shared_ptr<const DigitsData> data_;
  std::int64_t begin_;
  std::int64_t end_;
  bool image_;
  Split split_;
};

}  // namespace cleave::train
