#pragma once
// The documented PRNG of the scenario format (docs/scenarios.md, "Ranges and seeds"), so a
// draw can be reproduced by anyone from the seed and the field path alone:
//   stream seed = SplitMix64(seed XOR FNV-1a-64(field path))
//   stream      = successive SplitMix64 outputs from that state
//   uniform u   = (next >> 11) * 2^-53                      in [0, 1)
//   normal z    = sqrt(-2 ln(1 - u1)) * cos(2 pi u2)        (Box–Muller, one value per draw)
// Each field has its own stream, so adding a field to the format (or a job to a file) never
// changes what the other fields draw.
#include <cmath>
#include <cstdint>
#include <string_view>

#include "scenario/scenario.h"

namespace ithbat::scenario {

inline uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

inline uint64_t Fnv1a64(std::string_view s) {
  uint64_t h = 0xCBF29CE484222325ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001B3ULL;
  }
  return h;
}

inline uint64_t FieldSeed(uint64_t seed, std::string_view path) {
  uint64_t state = seed ^ Fnv1a64(path);
  return SplitMix64(state);
}

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() { return SplitMix64(state_); }
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  double Normal() {
    double u1 = Uniform();
    double u2 = Uniform();
    return std::sqrt(-2.0 * std::log(1.0 - u1)) * std::cos(2.0 * 3.14159265358979323846 * u2);
  }

 private:
  uint64_t state_;
};

// One draw of a parameter (the simulator uses the same function for per-step samples of
// distribution fields such as seq_len). Integer parameters: uniform is inclusive of both ends
// and every draw is rounded to the nearest integer by the caller.
template <class T>
double Sample(const Param<T>& p, Rng& rng) {
  auto clamp = [&](double v) { return v < p.min ? p.min : (v > p.max ? p.max : v); };
  switch (p.dist) {
    case Dist::kFixed:
      return p.value;
    case Dist::kUniform:
      if constexpr (std::is_integral_v<T>) {
        double span = p.max - p.min + 1;
        return clamp(std::floor(p.min + rng.Uniform() * span));
      } else {
        return p.min + rng.Uniform() * (p.max - p.min);
      }
    case Dist::kNormal:
      return clamp(p.mean + p.stddev * rng.Normal());
    case Dist::kLognormal:
      return clamp(p.median * std::exp(p.sigma * rng.Normal()));
    case Dist::kChoice: {
      if (p.choices.empty()) return 0;
      double total = 0;
      for (size_t i = 0; i < p.choices.size(); ++i) total += p.weights.empty() ? 1.0 : p.weights[i];
      double x = rng.Uniform() * total;
      for (size_t i = 0; i < p.choices.size(); ++i) {
        x -= p.weights.empty() ? 1.0 : p.weights[i];
        if (x < 0) return p.choices[i];
      }
      return p.choices.back();
    }
  }
  return p.value;
}

}  // namespace ithbat::scenario
