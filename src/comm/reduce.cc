#include "comm/reduce.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include <sys/mman.h>
#include <unistd.h>

#include "core/bf16.h"
#include "core/check.h"

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace tt::comm {

uint16_t float_to_f16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to infinity (or is)
  if (abs < 0x38800000u) {  // below the smallest normal half: a subnormal, or zero
    // value = abs_float; subnormal half = round(value / 2^-24).
    const float v = std::bit_cast<float>(abs);
    const float scaled = v * 16777216.0f;  // 2^24, exact
    // Round to nearest even: nearbyint in the default rounding mode.
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(scaled)));
  }
  // Normal: rebias the exponent (127 -> 15) and round the mantissa from 23 to 10 bits, to nearest even.
  uint32_t h = ((abs - 0x38000000u) >> 13);
  const uint32_t rest = abs & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // a carry into the exponent is still right
  return static_cast<uint16_t>(sign | h);
}

float f16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0) {
    const float v = std::ldexp(static_cast<float>(man), -24);  // zero or subnormal, exact
    return sign ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (man << 13));
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (man << 13));
}

namespace {

// Integer sums and products wrap around (two's complement, as numpy's), without signed overflow.
template <typename A>
inline A add(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;
    return static_cast<A>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}
template <typename A>
inline A mul(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;
    return static_cast<A>(static_cast<U>(a) * static_cast<U>(b));
  } else {
    return a * b;
  }
}

template <typename A>
inline A combine(A a, A b, Op op) {
  switch (op) {
    case Op::kSum:
    case Op::kAvg: return add(a, b);
    case Op::kProd: return mul(a, b);
    case Op::kMin: return std::min(a, b);
    case Op::kMax: return std::max(a, b);
    // Note [bitwise and logical reductions] (comm/comm.h): integers only (Communicator checks).
    case Op::kLand: return static_cast<A>(a != A(0) && b != A(0));
    case Op::kLor: return static_cast<A>(a != A(0) || b != A(0));
    case Op::kLxor: return static_cast<A>((a != A(0)) != (b != A(0)));
    case Op::kBand:
    case Op::kBor:
    case Op::kBxor:
      if constexpr (std::is_integral_v<A>) return op == Op::kBand ? (a & b) : op == Op::kBor ? (a | b) : (a ^ b);
      break;
  }
  return a;
}

// S: stored type; A: accumulation type; load/store convert.
template <typename S, typename A, typename Load, typename Store>
void reduce_typed(void* dst, const void* const* srcs, int n, size_t count, Op op, Load load, Store store) {
  S* d = static_cast<S*>(dst);
  // Blocks that stay in cache while every source is read; each block in source order.
  constexpr size_t kBlock = 2048;
  A acc[kBlock];
  for (size_t b = 0; b < count; b += kBlock) {
    const size_t m = std::min(kBlock, count - b);
    const S* s0 = static_cast<const S*>(srcs[0]) + b;
    for (size_t i = 0; i < m; ++i) acc[i] = load(s0[i]);
    for (int r = 1; r < n; ++r) {
      const S* s = static_cast<const S*>(srcs[r]) + b;
      switch (op) {
        case Op::kSum:
        case Op::kAvg:
          for (size_t i = 0; i < m; ++i) acc[i] = add(acc[i], load(s[i]));
          break;
        default:
          for (size_t i = 0; i < m; ++i) acc[i] = combine(acc[i], load(s[i]), op);
      }
    }
    if (op == Op::kAvg) {
      if constexpr (std::is_integral_v<A>) {  // integers truncate toward zero; n may not fit a byte
        for (size_t i = 0; i < m; ++i) acc[i] = static_cast<A>(static_cast<int64_t>(acc[i]) / n);
      } else {
        const A div = static_cast<A>(n);
        for (size_t i = 0; i < m; ++i) acc[i] = acc[i] / div;
      }
    }
    for (size_t i = 0; i < m; ++i) d[b + i] = store(acc[i]);
  }
}

}  // namespace

void reduce(void* dst, const void* const* srcs, int n, size_t count, DType dtype, Op op) {
  TT_CHECK(n >= 1, "reduce over %d sources", n);
  if (count == 0) return;
  auto id = [](auto x) { return x; };
  switch (dtype) {
    case DType::kF32: return reduce_typed<float, float>(dst, srcs, n, count, op, id, id);
    case DType::kF64: return reduce_typed<double, double>(dst, srcs, n, count, op, id, id);
    case DType::kI32: return reduce_typed<int32_t, int32_t>(dst, srcs, n, count, op, id, id);
    case DType::kI64: return reduce_typed<int64_t, int64_t>(dst, srcs, n, count, op, id, id);
    case DType::kU8: return reduce_typed<uint8_t, uint8_t>(dst, srcs, n, count, op, id, id);
    case DType::kBF16:
      return reduce_typed<uint16_t, float>(dst, srcs, n, count, op, [](uint16_t h) { return bf16_to_float(h); },
                                           [](float f) { return float_to_bf16(f); });
    case DType::kF16:
      return reduce_typed<uint16_t, float>(dst, srcs, n, count, op, [](uint16_t h) { return f16_to_float(h); },
                                           [](float f) { return float_to_f16(f); });
  }
}

void stream_copy(void* dst, const void* src, size_t bytes) {
#if defined(__x86_64__)
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  const size_t head = std::min(bytes, (64 - reinterpret_cast<uintptr_t>(d) % 64) % 64);
  std::memcpy(d, s, head);
  d += head;
  s += head;
  bytes -= head;
  const size_t body = bytes / 64 * 64;
  for (size_t i = 0; i < body; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 32));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 48), e);
  }
  std::memcpy(d + body, s + body, bytes - body);
  _mm_sfence();
#else
  std::memcpy(dst, src, bytes);
#endif
}

bool pages_resident(const void* p, size_t bytes) {
  if (bytes == 0) return true;
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  uintptr_t a = reinterpret_cast<uintptr_t>(p) / page * page;
  const uintptr_t end = reinterpret_cast<uintptr_t>(p) + bytes;
  constexpr size_t kPages = 1024;  // a vector of this many pages a call
  unsigned char vec[kPages];
  while (a < end) {
    const size_t pages = std::min<size_t>(kPages, (end - a + page - 1) / page);
    // A failure (not mapped by us: cannot be, the caller writes there next) counts as not resident: ordinary stores.
    if (mincore(reinterpret_cast<void*>(a), pages * page, vec) != 0) return false;
    for (size_t i = 0; i < pages; ++i)
      if ((vec[i] & 1) == 0) return false;
    a += pages * page;
  }
  return true;
}

}  // namespace tt::comm
