#include "store/chunk.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace ithbat::store {
namespace {

constexpr TimeNs kStart = 1'764'460'800 * kNsPerSec;

uint64_t Bits(double v) { return std::bit_cast<uint64_t>(v); }

std::vector<uint8_t> Encode(const std::vector<Sample>& samples, ChunkEncoder* enc = nullptr) {
  ChunkEncoder local;
  ChunkEncoder& e = enc ? *enc : local;
  for (const auto& s : samples) e.Append(s.t, s.v);
  return e.Bytes();
}

// Encodes, decodes and compares bit for bit; returns the encoded size.
size_t RoundTrip(const std::vector<Sample>& samples) {
  ChunkEncoder enc;
  auto bytes = Encode(samples, &enc);
  EXPECT_EQ(enc.count(), samples.size());
  EXPECT_EQ(bytes.size(), enc.size_bytes());
  if (!samples.empty()) {
    EXPECT_EQ(enc.first_time(), samples.front().t);
    EXPECT_EQ(enc.last_time(), samples.back().t);
    EXPECT_EQ(Bits(enc.last_value()), Bits(samples.back().v));
  }
  ChunkDecoder dec(bytes, samples.size());
  Sample s;
  size_t i = 0;
  while (dec.Next(&s)) {
    if (i >= samples.size()) {
      ADD_FAILURE() << "decoder returned more samples than encoded";
      break;
    }
    EXPECT_EQ(s.t, samples[i].t) << "sample " << i;
    EXPECT_EQ(Bits(s.v), Bits(samples[i].v)) << "sample " << i << ": " << s.v << " vs " << samples[i].v;
    if (s.t != samples[i].t || Bits(s.v) != Bits(samples[i].v)) break;  // one failure is enough
    ++i;
  }
  EXPECT_FALSE(dec.error());
  EXPECT_EQ(i, samples.size());
  return bytes.size();
}

std::vector<Sample> Regular(const std::vector<double>& values, TimeNs step = kNsPerSec) {
  std::vector<Sample> out;
  for (size_t i = 0; i < values.size(); ++i) out.push_back({kStart + static_cast<TimeNs>(i) * step, values[i]});
  return out;
}

TEST(ChunkTest, Empty) {
  ChunkEncoder enc;
  EXPECT_EQ(enc.count(), 0u);
  EXPECT_EQ(enc.size_bytes(), 0u);
  EXPECT_TRUE(enc.Bytes().empty());
  EXPECT_TRUE(DecodeChunk({}, 0).empty());
}

TEST(ChunkTest, SingleSample) {
  RoundTrip({{kStart, 42.5}});
  RoundTrip({{0, 0.0}});
  RoundTrip({{-5, -1.0}});
  RoundTrip({{kMaxTime, std::numeric_limits<double>::quiet_NaN()}});
  RoundTrip({{kMinTime, -0.0}});
}

TEST(ChunkTest, SpecialValues) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  double payload_nan = std::bit_cast<double>(uint64_t{0x7ff8dead'beef1234});
  double signalling = std::bit_cast<double>(uint64_t{0x7ff0000000000001});
  double neg_nan = std::bit_cast<double>(uint64_t{0xfff8000000000000});
  std::vector<double> values = {0.0,  -0.0, nan,  payload_nan, signalling, neg_nan, inf,   -inf, 1.0,
                                -0.0, 0.0,  inf,  inf,         -inf,       5.0,     nan,   5.0,  5.5,
                                std::numeric_limits<double>::denorm_min(), -std::numeric_limits<double>::denorm_min(),
                                std::numeric_limits<double>::min(), std::numeric_limits<double>::max(),
                                std::numeric_limits<double>::lowest(), 1e-300, 1e300, -1e300, 1e-310,
                                0.1 + 0.2, M_PI, -M_E, 1e20, 1.5e22, 9007199254740993.0, 2.0};
  RoundTrip(Regular(values));
}

TEST(ChunkTest, RandomBitPatterns) {
  std::mt19937_64 rng(1);
  std::vector<double> values;
  for (int i = 0; i < 5000; ++i) values.push_back(std::bit_cast<double>(rng()));
  RoundTrip(Regular(values));
}

TEST(ChunkTest, RandomDoubles) {
  std::mt19937_64 rng(2);
  std::uniform_real_distribution<double> u(-1e9, 1e9);
  std::vector<double> values;
  for (int i = 0; i < 5000; ++i) values.push_back(u(rng));
  RoundTrip(Regular(values));
}

TEST(ChunkTest, RandomWalks) {
  std::mt19937_64 rng(3);
  std::normal_distribution<double> g(0, 1);
  for (double scale : {1e-9, 1e-3, 1.0, 1e3, 1e12}) {
    std::vector<double> values;
    double v = 0;
    for (int i = 0; i < 3000; ++i) {
      v += g(rng) * scale;
      values.push_back(v);
    }
    RoundTrip(Regular(values));
  }
}

TEST(ChunkTest, Counters) {
  std::mt19937_64 rng(4);
  std::vector<double> energy, bytes, small;
  double e = 5'234'567'000, b = 7.2e12, s = 3;
  for (int i = 0; i < 4000; ++i) {
    e += static_cast<double>(static_cast<int64_t>(680'000 + 18'000 * std::normal_distribution<double>()(rng)));
    b += static_cast<double>(static_cast<int64_t>(3.1e10 + 1e8 * std::normal_distribution<double>()(rng)));
    if (rng() % 1000 == 0) s += 1;
    energy.push_back(e);
    bytes.push_back(b);
    small.push_back(s);
  }
  RoundTrip(Regular(energy));
  RoundTrip(Regular(bytes));
  size_t n = RoundTrip(Regular(small));
  EXPECT_LT(n, 4000u * 3 / 8 + 64);  // a mostly constant counter: about 2 bits a sample
  // Past 2^53 the counter is no longer an exact decimal at exponent 0.
  std::vector<double> huge;
  double h = 9.007e15;
  for (int i = 0; i < 1000; ++i) huge.push_back(h += 4096.0 * (1 + static_cast<double>(rng() % 100)));
  RoundTrip(Regular(huge));
}

TEST(ChunkTest, ConstantsAreCheap) {
  std::vector<double> values(10'000, 2619.0);
  size_t n = RoundTrip(Regular(values));
  // 1 bit of timestamp and 1 bit of value per sample, plus the first sample.
  EXPECT_LE(n, 10'000u * 2 / 8 + 32);
  RoundTrip(Regular(std::vector<double>(1000, 0.0)));
  RoundTrip(Regular(std::vector<double>(1000, -0.0)));
  RoundTrip(Regular(std::vector<double>(1000, std::numeric_limits<double>::quiet_NaN())));
}

TEST(ChunkTest, IntegerGaugesAndRatios) {
  std::mt19937_64 rng(5);
  std::normal_distribution<double> g(0, 1);
  std::vector<double> util, ratio, gpm, mixed;
  for (int i = 0; i < 5000; ++i) {
    util.push_back(std::clamp(std::round(97 + 1.2 * g(rng)), 0.0, 100.0));
    double r = std::clamp(0.86 + 0.02 * g(rng), 0.0, 1.0);
    ratio.push_back(std::round(r * 1e6) / 1e6);
    gpm.push_back(i % 7 == 0 ? 0.0 : std::round((88 + 1.5 * g(rng)) * 100) / 100);
    // Exponent changes back and forth: integers, short decimals, 6 digits, NaN, negatives.
    switch (i % 5) {
      case 0: mixed.push_back(static_cast<double>(i)); break;
      case 1: mixed.push_back(i * 0.5); break;
      case 2: mixed.push_back(std::round(g(rng) * 1e6) / 1e6); break;
      case 3: mixed.push_back(i % 15 == 3 ? std::numeric_limits<double>::quiet_NaN() : -i * 1e3); break;
      default: mixed.push_back(g(rng)); break;
    }
  }
  size_t n_util = RoundTrip(Regular(util));
  RoundTrip(Regular(ratio));
  RoundTrip(Regular(gpm));
  RoundTrip(Regular(mixed));
  // An integer percent with noise of about one unit: well under a byte a sample.
  EXPECT_LT(n_util, 5000u * 7 / 8);
}

TEST(ChunkTest, SmallDeltasAreShort) {
  // 100, 101, 100, 101, ...: 1 bit of timestamp + 2 bits of prefix + a short residual.
  std::vector<double> values;
  for (int i = 0; i < 1000; ++i) values.push_back(100.0 + (i % 2));
  size_t n = RoundTrip(Regular(values));
  EXPECT_LE(n * 8, 1000u * 8 + 128);
}

TEST(ChunkTest, IrregularTimestamps) {
  std::mt19937_64 rng(6);
  std::vector<Sample> samples;
  TimeNs t = kStart;
  for (int i = 0; i < 5000; ++i) {
    switch (rng() % 6) {
      case 0: t += 1; break;                                             // 1 ns
      case 1: t += kNsPerSec + static_cast<TimeNs>(rng() % 2'000'000); break;  // jitter
      case 2: t += 3600 * kNsPerSec; break;                                // an hour gap
      case 3: t += static_cast<TimeNs>(rng() % (1ull << 40)); break;
      case 4: t += kNsPerSec; break;
      default: t += 1 + static_cast<TimeNs>(rng() % 1000); break;
    }
    samples.push_back({t, static_cast<double>(i % 17)});
  }
  RoundTrip(samples);
}

TEST(ChunkTest, ExtremeTimestamps) {
  RoundTrip({{kMinTime, 1}, {kMinTime + 1, 2}, {0, 3}, {kMaxTime - 1, 4}, {kMaxTime, 5}});
  RoundTrip({{-1'000'000, 1}, {-1, 2}, {1, 3}});
}

TEST(ChunkTest, NanosecondJitter) {
  std::mt19937_64 rng(7);
  std::vector<Sample> samples;
  TimeNs t = kStart + 123'456'789;
  for (int i = 0; i < 10'000; ++i) {
    t += kNsPerSec + static_cast<TimeNs>(rng() % 400'000) - 200'000;
    samples.push_back({t, 60.0 + static_cast<double>(i / 100 % 5)});
  }
  size_t n = RoundTrip(samples);
  // The jitter lands in the 24-bit dod bucket: about 4 bytes a sample at most.
  EXPECT_LT(n, 10'000u * 4);
}

TEST(ChunkTest, TenThousandSamples) {
  std::mt19937_64 rng(8);
  std::vector<double> values;
  double temp = 60;
  for (int i = 0; i < 10'000; ++i) {
    temp += (70 - temp) * 0.02 + std::normal_distribution<double>(0, 0.05)(rng);
    values.push_back(std::round(temp));
  }
  RoundTrip(Regular(values));
}

TEST(ChunkTest, ClearReusesTheBuffer) {
  ChunkEncoder enc;
  enc.Reserve(512);
  size_t cap = enc.capacity_bytes();
  EXPECT_GE(cap, 512u);
  for (int round = 0; round < 3; ++round) {
    enc.Clear();
    std::vector<Sample> samples;
    for (int i = 0; i < 512; ++i) {
      samples.push_back({kStart + i * kNsPerSec, static_cast<double>((i * 7919) % 100)});
      enc.Append(samples.back().t, samples.back().v);
    }
    auto bytes = enc.Bytes();
    auto decoded = DecodeChunk(bytes, enc.count());
    ASSERT_EQ(decoded.size(), samples.size());
    for (size_t i = 0; i < samples.size(); ++i) {
      EXPECT_EQ(decoded[i].t, samples[i].t);
      EXPECT_EQ(decoded[i].v, samples[i].v);
    }
    // The first round may grow the buffer; afterwards Clear keeps what it has.
    if (round == 0) cap = enc.capacity_bytes();
    EXPECT_EQ(enc.capacity_bytes(), cap);
  }
}

TEST(ChunkTest, DecodingAPrefixOfTheCount) {
  auto samples = Regular({1, 2, 3, 4, 5, 6, 7, 8});
  auto bytes = Encode(samples);
  auto first3 = DecodeChunk(bytes, 3);
  ASSERT_EQ(first3.size(), 3u);
  EXPECT_EQ(first3[2].v, 3);
}

TEST(ChunkTest, TruncatedInputStopsWithError) {
  std::mt19937_64 rng(9);
  std::vector<double> values;
  for (int i = 0; i < 300; ++i) values.push_back(i % 3 == 0 ? std::bit_cast<double>(rng()) : i * 0.25);
  auto samples = Regular(values);
  auto bytes = Encode(samples);
  for (size_t len = 0; len < bytes.size(); ++len) {
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(len));
    ChunkDecoder dec(cut, samples.size());
    Sample s;
    size_t n = 0;
    while (dec.Next(&s)) {
      ASSERT_LT(n, samples.size());
      EXPECT_EQ(s.t, samples[n].t);
      EXPECT_EQ(Bits(s.v), Bits(samples[n].v));
      ++n;
    }
    EXPECT_TRUE(dec.error()) << "len " << len;
    EXPECT_LT(n, samples.size());
  }
}

TEST(ChunkTest, GarbageNeverCrashes) {
  std::mt19937_64 rng(10);
  for (int i = 0; i < 3000; ++i) {
    std::vector<uint8_t> junk(rng() % 200);
    for (auto& b : junk) b = static_cast<uint8_t>(rng());
    size_t count = rng() % 2 ? rng() % 2000 : std::numeric_limits<size_t>::max();
    ChunkDecoder dec(junk, count);
    Sample s;
    size_t n = 0;
    while (dec.Next(&s)) ++n;
    EXPECT_LE(n, junk.size() * 8);  // every sample consumes at least one bit
    auto all = DecodeChunk(junk, count);  // must not try to reserve `count` samples
    EXPECT_EQ(all.size(), n);
  }
  // Flipped bits in a valid chunk.
  std::vector<double> values;
  for (int i = 0; i < 200; ++i) values.push_back(i * 1.5 + (i % 7 == 0 ? 0.123456 : 0));
  auto good = Encode(Regular(values));
  for (int i = 0; i < 2000; ++i) {
    auto bad = good;
    bad[rng() % bad.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
    auto decoded = DecodeChunk(bad, values.size());
    EXPECT_LE(decoded.size(), values.size());
  }
}

}  // namespace
}  // namespace ithbat::store
