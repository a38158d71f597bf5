// What NVRTC gives a kernel, as plain C++, so that a host's C++ compiler
// can check count.cu as the card builds it (tests/cuda.rs).
#define __device__
#define __global__
#define __forceinline__ inline
#define __shared__
#define __restrict__
struct uint2 { unsigned x, y; };
struct uint4 { unsigned x, y, z, w; };
static inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { uint4 r = {a, b, c, d}; return r; }
static inline uint2 __ldg(const uint2 *p) { return *p; }
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline unsigned atomicAdd(unsigned *a, unsigned x) { unsigned o = *a; *a += x; return o; }
static inline unsigned long long atomicAdd(unsigned long long *a, unsigned long long x) { unsigned long long o = *a; *a += x; return o; }
static inline unsigned atomicOr(unsigned *a, unsigned x) { unsigned o = *a; *a |= x; return o; }
static inline unsigned long long atomicMax(unsigned long long *a, unsigned long long x) { unsigned long long o = *a; if (x > o) *a = x; return o; }
struct dim3 { unsigned x, y, z; };
extern dim3 threadIdx, blockDim;
