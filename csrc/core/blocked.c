/* blocked.c: see blocked.h. */
#include "blocked.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__linux__)
#include <sys/mman.h>
#endif

/* XXH3 inlined into the single-key calls (the same function lb_hash_xxh3 calls). */
#define XXH_INLINE_ALL
#include <xxhash.h>

#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__))
#define LB_HAVE_AVX2_CODE 1
#include <cpuid.h>
#include <immintrin.h>
#define LB_AVX2 __attribute__((target("avx2,popcnt")))
#else
#define LB_HAVE_AVX2_CODE 0
#endif

/* Filters of at least this many bytes are mapped for transparent huge pages. */
#ifndef LB_BLOCKED_HUGE_MIN
#define LB_BLOCKED_HUGE_MIN ((size_t)4 << 20)
#endif
#define LB_BLOCKED_HUGE_ALIGN ((size_t)2 << 20)

/* How many keys ahead a batch hashes and prefetches: one line per key. */
#ifndef LB_BLOCKED_AHEAD
#define LB_BLOCKED_AHEAD 16
#endif

#define LB_ALIGN64 __attribute__((aligned(64)))

const uint32_t LB_BLOCKED_SALT[LB_MAX_K] LB_ALIGN64 = {
    /* round 0: the Parquet / Impala split-block multipliers */
    0x47b6137bu, 0x44974d91u, 0x8824ad5bu, 0xa2b7289du,
    0x705495c7u, 0x2df1424bu, 0x9efc4947u, 0x5c6bfb31u,
    /* rounds 1..7: SplitMix64 from 0x6c696e672d626c6b ("ling-blk"), high 32 bits, | 1 */
    0x612cb08fu, 0x7849f019u, 0x290f90e3u, 0x71553995u,
    0x49fcdd13u, 0xfc6395b3u, 0xc372f77fu, 0x71e1726fu,
    0x8b44adf3u, 0x2c6025efu, 0x80ec0101u, 0x7b444717u,
    0x1c73ad81u, 0xf5060e89u, 0xf7815919u, 0xc0fdb137u,
    0xb60b53c5u, 0x5138a095u, 0xc59cb4bbu, 0x0b9fb033u,
    0xfbfc0e91u, 0xb8cf50c1u, 0xde96fc6du, 0xfb61f79bu,
    0xd981dfdbu, 0x421c078fu, 0x7b6f6815u, 0x448549ddu,
    0xfb5f70dbu, 0xefd6e0cfu, 0xf7a9808bu, 0x4631a155u,
    0x654884abu, 0x355cb61fu, 0x537617adu, 0x136cd14fu,
    0xb84712e3u, 0xa8ad11fdu, 0x2d1c4121u, 0xcaaa0797u,
    0x9c560e7du, 0xda57fecbu, 0x648080cdu, 0x602bdb5fu,
    0x87bf1e89u, 0x5013a53fu, 0x1c5e3277u, 0x053ea787u,
    0xa0dc7873u, 0xbdc01f11u, 0x08abc8e5u, 0x8b2d97cbu,
    0x73d851e5u, 0xd8b2cff9u, 0x0d1a4b57u, 0x05513427u,
};

/* lb_hash_blocked, inlined. */
static inline lb_hash_pair hash_key(const void *data, size_t len)
{
    return lb_blocked_pair(XXH3_64bits(data, len));
}

/* The same for a key of at most LB_SHORT_KEY bytes: XXH3's paths for those
 * are straight-line code with no call, so a per-key probe built on it is a
 * leaf function with no stack frame (see lb_blocked_test_key). */
#define LB_SHORT_KEY 128
static inline lb_hash_pair hash_short_key(const void *data, size_t len)
{
#if defined(__GNUC__) || defined(__clang__)
    if (len > LB_SHORT_KEY) /* the callers' condition: lets the compiler drop XXH3's long paths */
        __builtin_unreachable();
#endif
    return lb_blocked_pair(XXH3_64bits(data, len));
}

static inline uint32_t round_word(lb_hash_pair h, uint32_t j)
{
    if (j == 0)
        return (uint32_t)h.h1;
    if (j == 1)
        return (uint32_t)(h.h2 >> 32);
    return (uint32_t)(lb_mix64(h.h2 + (uint64_t)j * UINT64_C(0x9e3779b97f4a7c15)) >> 32);
}

static inline uint64_t *block_of(const lb_blocked *b, lb_hash_pair h)
{
    return b->words + 8 * lb_blocked_block_of(b->nblocks, h);
}

/* ---- implementation choice ----------------------------------------------- */

/* AVX2 and POPCNT, and the OS saving the YMM registers: what __builtin_cpu_supports
 * answers, asked of CPUID directly, because __builtin_cpu_supports needs __cpu_model from
 * the compiler's runtime library, which some toolchains (zig cc, which builds the
 * manylinux wheels) do not provide. */
static int cpu_has_avx2(void)
{
#if LB_HAVE_AVX2_CODE
    unsigned a, b, c, d, xcr0_lo, xcr0_hi;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return 0;
    const unsigned popcnt = 1u << 23, osxsave = 1u << 27, avx = 1u << 28;
    if ((c & (popcnt | osxsave | avx)) != (popcnt | osxsave | avx))
        return 0;
    __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    if ((xcr0_lo & 6u) != 6u) /* XMM and YMM state */
        return 0;
    if (__get_cpuid_max(0, NULL) < 7)
        return 0;
    __cpuid_count(7, 0, a, b, c, d);
    return (b >> 5) & 1u; /* AVX2 */
#else
    return 0;
#endif
}

/* -1: not chosen yet; then 0 (portable) or 1 (AVX2).  Read and written with
 * relaxed atomics (plain moves): threads that choose at once all store what
 * the CPU has, and _simd's choice is for tests that run in one thread. */
static int use_avx2 = -1;
#define USE_AVX2() __atomic_load_n(&use_avx2, __ATOMIC_RELAXED)
#define SET_AVX2(v) __atomic_store_n(&use_avx2, (v), __ATOMIC_RELAXED)

static inline int avx2_on(void)
{
    int v = USE_AVX2();
    if (LB_UNLIKELY(v < 0)) {
        v = cpu_has_avx2();
        SET_AVX2(v);
    }
    return v;
}

lb_status lb_blocked_set_impl(int which)
{
    switch (which) {
    case LB_BLOCKED_IMPL_AUTO:
        SET_AVX2(cpu_has_avx2());
        return LB_OK;
    case LB_BLOCKED_IMPL_PORTABLE:
        SET_AVX2(0);
        return LB_OK;
    case LB_BLOCKED_IMPL_AVX2:
        if (!cpu_has_avx2())
            return LB_ERR_ARG;
        SET_AVX2(1);
        return LB_OK;
    }
    return LB_ERR_ARG;
}

const char *lb_blocked_impl_name(void)
{
    return avx2_on() ? "avx2" : "portable";
}

/* ---- portable probes ------------------------------------------------------ */

static inline void masks_of(uint32_t rounds, lb_hash_pair h, uint64_t mask[LB_BLOCKED_LANES]);

#ifdef LB_ATOMIC_STORAGE
/* Built for threads that add in parallel: each lane's bits go in with one
 * atomic OR (skipped when the lane has them all), and the fresh bits are the
 * ones the OR found clear, so a bit two threads set at once counts once.
 * The AVX2 probes below take these too: a vector store would put back a lane
 * another thread changed since the vector was loaded. */
static inline unsigned add_atomic(uint64_t *blk, uint32_t rounds, lb_hash_pair h)
{
    uint64_t mask[LB_BLOCKED_LANES];
    unsigned fresh = 0;
    masks_of(rounds, h, mask);
    for (int i = 0; i < LB_BLOCKED_LANES; i++) {
        if ((__atomic_load_n(&blk[i], __ATOMIC_RELAXED) & mask[i]) == mask[i])
            continue;
        uint64_t old = __atomic_fetch_or(&blk[i], mask[i], __ATOMIC_RELAXED);
        fresh += (unsigned)__builtin_popcountll(mask[i] & ~old);
    }
    return fresh;
}

static inline int test_atomic(const uint64_t *blk, uint32_t rounds, lb_hash_pair h)
{
    uint64_t want[LB_BLOCKED_LANES], miss = 0;
    masks_of(rounds, h, want);
    for (int i = 0; i < LB_BLOCKED_LANES; i++)
        miss |= want[i] & ~__atomic_load_n(&blk[i], __ATOMIC_RELAXED);
    return miss == 0;
}
#endif

static inline unsigned add_portable(uint64_t *blk, uint32_t rounds, lb_hash_pair h)
{
#ifdef LB_ATOMIC_STORAGE
    return add_atomic(blk, rounds, h);
#endif
    unsigned fresh = 0;
    for (uint32_t j = 0; j < rounds; j++) {
        const uint32_t y = round_word(h, j);
        const uint32_t *s = LB_BLOCKED_SALT + 8 * j;
        for (int i = 0; i < 8; i++) {
            uint64_t bit = UINT64_C(1) << ((uint32_t)(y * s[i]) >> 26);
            fresh += !(blk[i] & bit);
            blk[i] |= bit;
        }
    }
    return fresh;
}

/* The bits of h in each of the block's 8 lanes: what an add ORs in and a
 * test checks (the one definition; lb_blocked_masks exports it). */
static inline void masks_of(uint32_t rounds, lb_hash_pair h, uint64_t mask[LB_BLOCKED_LANES])
{
    for (int i = 0; i < LB_BLOCKED_LANES; i++)
        mask[i] = 0;
    for (uint32_t j = 0; j < rounds; j++) {
        const uint32_t y = round_word(h, j);
        const uint32_t *s = LB_BLOCKED_SALT + 8 * j;
        for (int i = 0; i < LB_BLOCKED_LANES; i++)
            mask[i] |= UINT64_C(1) << ((uint32_t)(y * s[i]) >> 26);
    }
}

static inline int test_portable(const uint64_t *blk, uint32_t rounds, lb_hash_pair h)
{
#ifdef LB_ATOMIC_STORAGE
    return test_atomic(blk, rounds, h);
#endif
    uint64_t want[LB_BLOCKED_LANES], miss = 0;
    masks_of(rounds, h, want);
    for (int i = 0; i < LB_BLOCKED_LANES; i++)
        miss |= want[i] & ~blk[i];
    return miss == 0;
}

void lb_blocked_masks(uint32_t rounds, lb_hash_pair h, uint64_t mask[LB_BLOCKED_LANES])
{
    masks_of(rounds, h, mask);
}

/* ---- AVX2 probes ------------------------------------------------------------ */

#if LB_HAVE_AVX2_CODE
/* The bits of round j, whose word is y, for lanes 0-3 (lo) and 4-7 (hi). */
#define AVX2_ROUND_BITS(y, j, lo, hi)                                                      \
    do {                                                                                   \
        __m256i y_ = _mm256_set1_epi32((int)(y));                                          \
        __m256i s_ = _mm256_load_si256((const __m256i *)(LB_BLOCKED_SALT + 8 * (j)));      \
        __m256i p_ = _mm256_srli_epi32(_mm256_mullo_epi32(y_, s_), 26);                    \
        const __m256i one_ = _mm256_set1_epi64x(1);                                        \
        (lo) = _mm256_sllv_epi64(one_, _mm256_cvtepu32_epi64(_mm256_castsi256_si128(p_))); \
        (hi) = _mm256_sllv_epi64(one_, _mm256_cvtepu32_epi64(_mm256_extracti128_si256(p_, 1))); \
    } while (0)

/* The bits of every round (the key's masks), rounds 0 and 1 written out: a
 * per-key call is short, and at 1e7 keys and more the CPU overlaps one key's
 * block read with the next key's work only when the code between the two
 * fits in its reorder window (paired runs, absent 36-byte keys, n = 1e7:
 * every instruction cut from a key's path showed). */
LB_AVX2 static inline void avx2_masks(uint32_t rounds, lb_hash_pair h, __m256i *lo, __m256i *hi)
{
    AVX2_ROUND_BITS((uint32_t)h.h1, 0, *lo, *hi);
    if (rounds > 1) {
        __m256i blo, bhi;
        AVX2_ROUND_BITS((uint32_t)(h.h2 >> 32), 1, blo, bhi);
        *lo = _mm256_or_si256(*lo, blo);
        *hi = _mm256_or_si256(*hi, bhi);
        for (uint32_t j = 2; j < rounds; j++) {
            AVX2_ROUND_BITS(round_word(h, j), j, blo, bhi);
            *lo = _mm256_or_si256(*lo, blo);
            *hi = _mm256_or_si256(*hi, bhi);
        }
    }
}

/* One round of an add: the lanes whose bit was 0 count as fresh (rounds apply
 * in order, so a bit set twice by one key counts once), then the bits go in. */
#define AVX2_ADD_ROUND(y, j)                                                               \
    do {                                                                                   \
        __m256i blo_, bhi_;                                                                \
        AVX2_ROUND_BITS((y), (j), blo_, bhi_);                                             \
        int zl_ = _mm256_movemask_pd(_mm256_castsi256_pd(                                  \
            _mm256_cmpeq_epi64(_mm256_and_si256(lo, blo_), zero)));                        \
        int zh_ = _mm256_movemask_pd(_mm256_castsi256_pd(                                  \
            _mm256_cmpeq_epi64(_mm256_and_si256(hi, bhi_), zero)));                        \
        fresh += (unsigned)__builtin_popcount((unsigned)(zl_ | (zh_ << 4)));               \
        lo = _mm256_or_si256(lo, blo_);                                                    \
        hi = _mm256_or_si256(hi, bhi_);                                                    \
    } while (0)

LB_AVX2 static inline unsigned add_avx2(uint64_t *blk, uint32_t rounds, lb_hash_pair h)
{
#ifdef LB_ATOMIC_STORAGE
    return add_atomic(blk, rounds, h);
#endif
    __m256i lo = _mm256_load_si256((const __m256i *)blk);
    __m256i hi = _mm256_load_si256((const __m256i *)(blk + 4));
    const __m256i zero = _mm256_setzero_si256();
    unsigned fresh = 0;
    AVX2_ADD_ROUND((uint32_t)h.h1, 0);
    if (rounds > 1) {
        AVX2_ADD_ROUND((uint32_t)(h.h2 >> 32), 1);
        for (uint32_t j = 2; j < rounds; j++)
            AVX2_ADD_ROUND(round_word(h, j), j);
    }
    _mm256_store_si256((__m256i *)blk, lo);
    _mm256_store_si256((__m256i *)(blk + 4), hi);
    return fresh;
}

LB_AVX2 static inline int test_avx2(const uint64_t *blk, uint32_t rounds, lb_hash_pair h)
{
#ifdef LB_ATOMIC_STORAGE
    return test_atomic(blk, rounds, h);
#endif
    __m256i want_lo, want_hi;
    avx2_masks(rounds, h, &want_lo, &want_hi);
    __m256i lo = _mm256_load_si256((const __m256i *)blk);
    __m256i hi = _mm256_load_si256((const __m256i *)(blk + 4));
    /* testc: 1 when (~have & want) == 0 */
    return _mm256_testc_si256(lo, want_lo) & _mm256_testc_si256(hi, want_hi);
}

LB_AVX2 static inline int add_one_avx2(lb_blocked *b, lb_hash_pair h)
{
    unsigned fresh = add_avx2(block_of(b, h), b->rounds, h);
    LB_COUNT_ADD(&b->bits_set, fresh);
    return fresh != 0;
}

LB_AVX2 static inline int test_one_avx2(const lb_blocked *b, lb_hash_pair h)
{
    return test_avx2(block_of(b, h), b->rounds, h);
}
#endif

#if LB_HAVE_AVX2_CODE
LB_AVX2 static int add_short_key_avx2(lb_blocked *b, const void *data, size_t len)
{
    return add_one_avx2(b, hash_short_key(data, len));
}

LB_AVX2 static int test_short_key_avx2(const lb_blocked *b, const void *data, size_t len)
{
    return test_one_avx2(b, hash_short_key(data, len));
}
#endif

/* Any key, any implementation: the per-key entries below take this only for
 * a key longer than LB_SHORT_KEY or before the AVX2 choice is made. */
static LB_NOINLINE int add_key_any(lb_blocked *b, const void *data, size_t len)
{
    return lb_blocked_add(b, hash_key(data, len));
}

static LB_NOINLINE int test_key_any(const lb_blocked *b, const void *data, size_t len)
{
    return lb_blocked_test(b, hash_key(data, len));
}

/* A per-key call is a jump to a leaf function: at 1e7 keys and more a key's
 * block read overlaps the next key's work only while the instructions between
 * them fit the CPU's reorder window (see avx2_masks), so the common case (AVX2
 * chosen, a key of at most 128 bytes) pays no frame and no second call. */
int lb_blocked_add_key(lb_blocked *b, const void *data, size_t len)
{
#if LB_HAVE_AVX2_CODE
    if (LB_LIKELY(USE_AVX2() > 0 && len <= LB_SHORT_KEY))
        return add_short_key_avx2(b, data, len);
#endif
    return add_key_any(b, data, len);
}

int lb_blocked_test_key(const lb_blocked *b, const void *data, size_t len)
{
#if LB_HAVE_AVX2_CODE
    if (LB_LIKELY(USE_AVX2() > 0 && len <= LB_SHORT_KEY))
        return test_short_key_avx2(b, data, len);
#endif
    return test_key_any(b, data, len);
}

int lb_blocked_add(lb_blocked *b, lb_hash_pair h)
{
#if LB_HAVE_AVX2_CODE
    if (LB_LIKELY(avx2_on()))
        return add_one_avx2(b, h);
#endif
    unsigned fresh = add_portable(block_of(b, h), b->rounds, h);
    LB_COUNT_ADD(&b->bits_set, fresh);
    return fresh != 0;
}

int lb_blocked_test(const lb_blocked *b, lb_hash_pair h)
{
#if LB_HAVE_AVX2_CODE
    if (LB_LIKELY(avx2_on()))
        return test_one_avx2(b, h);
#endif
    return test_portable(block_of(b, h), b->rounds, h);
}

/* ---- batches ------------------------------------------------------------------ */

/* A ring of the next LB_BLOCKED_AHEAD keys' hashes and blocks: each key is
 * hashed (and its block prefetched) that many keys before it is probed.
 * HASH(i) gives key i's pair (GIVEN_PAIR: hashed before, by the binding
 * while it reads the keys).  The blocks are fetched into L1 (locality 3;
 * the ring is LB_BLOCKED_AHEAD lines): at n = 1e6, 1% (1.2 MiB, in L2/L3)
 * the batch add and test in C were 6% and 12% faster than with a prefetch
 * into L2 as the bitarray walk does, and no different at 1e7 (memory-bound;
 * measured with a C loop over lb_blocked_add_hashed / lb_blocked_test_hashed
 * on "user:N" keys).  words and nblocks are read once: the stores into
 * the blocks could otherwise alias them. */
#define BLOCKED_PREFETCH(p) __builtin_prefetch((p), 0, 3)
#define BLOCKED_BATCH(B, HASH, N, BODY)                                                  \
    do {                                                                                 \
        lb_hash_pair hr_[LB_BLOCKED_AHEAD];                                              \
        uint64_t *br_[LB_BLOCKED_AHEAD];                                                 \
        uint64_t *const words_ = (B)->words;                                             \
        const uint64_t nblocks_ = (B)->nblocks;                                          \
        size_t ahead_ = (N) < LB_BLOCKED_AHEAD ? (N) : LB_BLOCKED_AHEAD;                 \
        for (size_t j_ = 0; j_ < ahead_; j_++) {                                         \
            hr_[j_] = HASH(j_);                                                          \
            br_[j_] = words_ + 8 * lb_blocked_block_of(nblocks_, hr_[j_]);               \
            BLOCKED_PREFETCH(br_[j_]);                                                   \
        }                                                                                \
        for (size_t j_ = 0; j_ < (N); j_++) {                                            \
            const size_t r_ = j_ % LB_BLOCKED_AHEAD;                                     \
            const lb_hash_pair h = hr_[r_];                                              \
            uint64_t *const blk = br_[r_];                                               \
            const size_t key_no = j_;                                                    \
            BODY                                                                         \
            const size_t next_ = j_ + LB_BLOCKED_AHEAD;                                  \
            if (next_ < (N)) {                                                           \
                hr_[r_] = HASH(next_);                                                   \
                br_[r_] = words_ + 8 * lb_blocked_block_of(nblocks_, hr_[r_]);           \
                BLOCKED_PREFETCH(br_[r_]);                                               \
            }                                                                            \
        }                                                                                \
    } while (0)

#define GIVEN_PAIR(i) (pairs[(i)])

/* The add and test batches of one implementation (portable, avx2). */
#define BLOCKED_BATCH_FNS(ATTR, IMPL, SRC, SRC_T, HASH)                                  \
    ATTR static void add_##SRC##_##IMPL(lb_blocked *b, const SRC_T *SRC, size_t n,       \
                                         uint8_t *out)                                   \
    {                                                                                    \
        const uint32_t rounds = b->rounds;                                               \
        uint64_t fresh_total = 0;                                                        \
        BLOCKED_BATCH(b, HASH, n, {                                                   \
            unsigned fresh = add_##IMPL(blk, rounds, h);                                 \
            fresh_total += fresh;                                                        \
            if (out)                                                                     \
                out[key_no] = (uint8_t)(fresh != 0);                                     \
        });                                                                              \
        LB_COUNT_ADD(&b->bits_set, fresh_total);                                         \
    }                                                                                    \
    ATTR static void test_##SRC##_##IMPL(const lb_blocked *b, const SRC_T *SRC, size_t n, \
                                          uint8_t *out)                                  \
    {                                                                                    \
        const uint32_t rounds = b->rounds;                                               \
        BLOCKED_BATCH(b, HASH, n, { out[key_no] = (uint8_t)test_##IMPL(blk, rounds, h); }); \
    }

BLOCKED_BATCH_FNS(, portable, pairs, lb_hash_pair, GIVEN_PAIR)
#if LB_HAVE_AVX2_CODE
BLOCKED_BATCH_FNS(LB_AVX2, avx2, pairs, lb_hash_pair, GIVEN_PAIR)
#define LB_BLOCKED_DISPATCH(FN, ...)                                                     \
    do {                                                                                 \
        if (avx2_on())                                                                   \
            FN##_avx2(__VA_ARGS__);                                                      \
        else                                                                             \
            FN##_portable(__VA_ARGS__);                                                  \
    } while (0)
#else
#define LB_BLOCKED_DISPATCH(FN, ...) FN##_portable(__VA_ARGS__)
#endif

void lb_blocked_add_hashed(lb_blocked *b, const lb_hash_pair *pairs, size_t n, uint8_t *out)
{
    LB_BLOCKED_DISPATCH(add_pairs, b, pairs, n, out);
}

void lb_blocked_test_hashed(const lb_blocked *b, const lb_hash_pair *pairs, size_t n,
                            uint8_t *out)
{
    LB_BLOCKED_DISPATCH(test_pairs, b, pairs, n, out);
}

/* ---- storage ------------------------------------------------------------------ */

lb_status lb_blocked_check_geometry(uint64_t m, uint64_t k)
{
    if (m == 0 || m % LB_BLOCKED_BLOCK_BITS)
        return LB_ERR_CAPACITY;
    if (m > LB_MAX_BITS)
        return LB_ERR_RANGE;
    if (k == 0 || k > LB_MAX_K || k % LB_BLOCKED_LANES)
        return LB_ERR_ARG;
    return LB_OK;
}

lb_status lb_blocked_init(lb_blocked *b, uint64_t m, uint32_t k)
{
    b->nblocks = m / LB_BLOCKED_BLOCK_BITS;
    b->rounds = k / LB_BLOCKED_LANES;
    b->bits_set = 0;
    b->words = NULL;
    if (b->nblocks > (SIZE_MAX - 64) / 64) {
        b->raw = NULL;
        return LB_ERR_NOMEM;
    }
    const size_t bytes = (size_t)b->nblocks * 64;
    b->raw_len = 0;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    /* A filter of several MiB is probed at random, one block per key: with 4 KiB
     * pages nearly every probe also misses the TLB.  Map it aligned to 2 MiB and
     * ask for transparent huge pages (where the system gives them on request);
     * the pages are zero and come as they are touched. */
    if (bytes >= LB_BLOCKED_HUGE_MIN && bytes <= SIZE_MAX - LB_BLOCKED_HUGE_ALIGN) {
        size_t len = bytes + LB_BLOCKED_HUGE_ALIGN;
        void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p != MAP_FAILED) {
            uintptr_t start = ((uintptr_t)p + LB_BLOCKED_HUGE_ALIGN - 1) &
                              ~(uintptr_t)(LB_BLOCKED_HUGE_ALIGN - 1);
            (void)madvise((void *)start, bytes, MADV_HUGEPAGE); /* advice only */
            b->raw = p;
            b->raw_len = len;
            b->words = (uint64_t *)start;
            return LB_OK;
        }
    }
#endif
    /* calloc: large arrays come as zero pages, touched only when used; the
     * extra 64 bytes let the words start on a cache line. */
    b->raw = calloc(bytes + 64, 1);
    if (!b->raw)
        return LB_ERR_NOMEM;
    b->words = (uint64_t *)(((uintptr_t)b->raw + 63) & ~(uintptr_t)63);
    return LB_OK;
}

void lb_blocked_free(lb_blocked *b)
{
#if defined(__linux__)
    if (b->raw_len) {
        munmap(b->raw, b->raw_len);
        b->raw_len = 0;
    }
    else
#endif
        free(b->raw);
    b->raw = NULL;
    b->words = NULL;
}

void lb_blocked_clear(lb_blocked *b)
{
    memset(b->words, 0, (size_t)b->nblocks * 64);
    b->bits_set = 0;
}

uint64_t lb_blocked_popcount(const lb_blocked *b)
{
    uint64_t total = 0;
    const size_t n = (size_t)b->nblocks * 8;
    for (size_t i = 0; i < n; i++)
        total += (uint64_t)__builtin_popcountll(b->words[i]);
    return total;
}

void lb_blocked_or(lb_blocked *dst, const lb_blocked *src)
{
    const size_t n = (size_t)dst->nblocks * 8;
    for (size_t i = 0; i < n; i++)
        dst->words[i] |= src->words[i];
    dst->bits_set = lb_blocked_popcount(dst);
}

void lb_blocked_and(lb_blocked *dst, const lb_blocked *src)
{
    const size_t n = (size_t)dst->nblocks * 8;
    for (size_t i = 0; i < n; i++)
        dst->words[i] &= src->words[i];
    dst->bits_set = lb_blocked_popcount(dst);
}

void lb_blocked_export(const lb_blocked *b, uint8_t *out)
{
    const size_t n = (size_t)b->nblocks * 8;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(out, b->words, n * 8);
#else
    for (size_t i = 0; i < n; i++)
        for (int j = 0; j < 8; j++)
            out[8 * i + j] = (uint8_t)(b->words[i] >> (8 * j));
#endif
}

void lb_blocked_import(lb_blocked *b, const uint8_t *in)
{
    const size_t n = (size_t)b->nblocks * 8;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(b->words, in, n * 8);
#else
    for (size_t i = 0; i < n; i++) {
        uint64_t w = 0;
        for (int j = 7; j >= 0; j--)
            w = (w << 8) | in[8 * i + j];
        b->words[i] = w;
    }
#endif
    b->bits_set = lb_blocked_popcount(b);
}

const uint8_t *lb_blocked_bytes(const lb_blocked *b, uint8_t **to_free)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    *to_free = NULL;
    return (const uint8_t *)b->words;
#else
    *to_free = malloc((size_t)b->nblocks * 64);
    if (*to_free)
        lb_blocked_export(b, *to_free);
    return *to_free;
#endif
}

double lb_blocked_current_fpr(const lb_blocked *b)
{
    double sum = 0.0;
    const double scale = 1.0 / 281474976710656.0; /* 64^-8 */
    for (uint64_t blk = 0; blk < b->nblocks; blk++) {
        const uint64_t *w = b->words + 8 * blk;
        uint64_t prod = 1;
        for (int i = 0; i < 8 && prod; i++)
            prod *= (uint64_t)__builtin_popcountll(w[i]);
        if (prod)
            sum += pow((double)prod * scale, (double)b->rounds);
    }
    return sum / (double)b->nblocks;
}

/* ---- theory and sizing ---------------------------------------------------------- */

/* The coefficients of P(a new key's bits in one lane are all set | T bits
 * thrown into the lane) = sum_{j=0..r} c[j] (1 - j/64)^T: the key's r bits
 * cover D distinct cells with probability P(D), and D given cells are all hit
 * by T uniform throws with probability sum_j (-1)^j C(D, j) (1 - j/64)^T. */
static void lane_coefficients(uint32_t r, double *c)
{
    double P[LB_BLOCKED_MAX_ROUNDS + 1] = {1.0};
    for (uint32_t t = 0; t < r; t++) {
        for (uint32_t d = t + 1; d >= 1; d--)
            P[d] = P[d] * ((double)d / 64.0) + P[d - 1] * ((64.0 - (double)(d - 1)) / 64.0);
        P[0] = 0.0;
    }
    for (uint32_t j = 0; j <= r; j++)
        c[j] = 0.0;
    for (uint32_t d = 1; d <= r; d++) {
        double binom = 1.0; /* C(d, j) */
        for (uint32_t j = 0; j <= d; j++) {
            c[j] += P[d] * ((j & 1) ? -binom : binom);
            binom = binom * (double)(d - j) / (double)(j + 1);
        }
    }
}

static double lane_prob(const double *c, const double *logx, uint32_t r, double throws)
{
    double s = c[0];
    for (uint32_t j = 1; j <= r; j++)
        s += c[j] * exp(throws * logx[j]);
    return s < 0.0 ? 0.0 : s > 1.0 ? 1.0 : s;
}

static double blocked_fpr(uint64_t nblocks, uint32_t r, uint64_t n, const double *c,
                          const double *logx)
{
    if (n == 0)
        return 0.0;
    const double nd = (double)n;
    if (nblocks == 1) {
        double q = lane_prob(c, logx, r, (double)r * nd);
        return pow(q, 8.0);
    }
    const double pb = 1.0 / (double)nblocks;
    const double mu = nd * pb, sd = sqrt(nd * pb * (1.0 - pb));
    double lo = floor(mu - 12.0 * sd - 10.0), hi = ceil(mu + 12.0 * sd + 30.0);
    if (lo < 0.0)
        lo = 0.0;
    if (hi > nd)
        hi = nd;
    /* Past 51,200 bits thrown into a lane, (63/64)^throws underflows: every lane is
     * full in double precision.  A window that starts there (a huge n for the blocks)
     * is a rate of 1, and is never walked (it could be wider than a double counts). */
    if (lo * (double)r > 64.0 * 800.0)
        return 1.0;
    /* The Binomial weights by their ratio, pmf(L + 1) / pmf(L) = (n - L) / (L + 1) * pb /
     * (1 - pb), from the window's first L, then normalised over the window (which holds
     * all but a negligible part of the mass): no lgamma(n) of a huge n, whose rounding
     * would swamp the differences taken. */
    const double odds = log(pb) - log1p(-pb);
    double logw = 0.0, top = -INFINITY;
    for (double L = lo; L <= hi; L += 1.0) {
        if (logw > top)
            top = logw;
        logw += log((nd - L) / (L + 1.0)) + odds;
    }
    double sum = 0.0, mass = 0.0;
    logw = 0.0;
    for (double L = lo; L <= hi; L += 1.0) {
        double w = exp(logw - top);
        double q = lane_prob(c, logx, r, (double)r * L);
        double q2 = q * q, q4 = q2 * q2;
        sum += w * q4 * q4;
        mass += w;
        logw += log((nd - L) / (L + 1.0)) + odds;
    }
    return sum / mass;
}

static void theory_tables(uint32_t r, double *c, double *logx)
{
    lane_coefficients(r, c);
    for (uint32_t j = 0; j <= r; j++)
        logx[j] = log1p(-(double)j / 64.0);
}

double lb_blocked_fpr(uint64_t m, uint32_t k, uint64_t n)
{
    uint32_t r = k / LB_BLOCKED_LANES;
    if (m < LB_BLOCKED_BLOCK_BITS || r < 1 || r > LB_BLOCKED_MAX_ROUNDS)
        return NAN;
    double c[LB_BLOCKED_MAX_ROUNDS + 1], logx[LB_BLOCKED_MAX_ROUNDS + 1];
    theory_tables(r, c, logx);
    return blocked_fpr(m / LB_BLOCKED_BLOCK_BITS, r, n, c, logx);
}

/* The fewest blocks (<= LB_BLOCKED_MAX_BLOCKS) with rate <= p at r rounds, or 0. */
static uint64_t fewest_blocks(uint64_t n, double p, uint32_t r, uint64_t guess)
{
    double c[LB_BLOCKED_MAX_ROUNDS + 1], logx[LB_BLOCKED_MAX_ROUNDS + 1];
    theory_tables(r, c, logx);
    uint64_t lo = 0, hi = guess < 1 ? 1 : guess; /* rate(lo) > p (lo = 0: none) */
    if (hi > LB_BLOCKED_MAX_BLOCKS)
        hi = LB_BLOCKED_MAX_BLOCKS;
    while (blocked_fpr(hi, r, n, c, logx) > p) {
        if (hi >= LB_BLOCKED_MAX_BLOCKS)
            return 0;
        lo = hi;
        hi = hi * 2 > LB_BLOCKED_MAX_BLOCKS ? LB_BLOCKED_MAX_BLOCKS : hi * 2;
    }
    if (lo == 0) {
        /* the guess holds: halve down to a failing size, then bisect */
        while (hi > 1 && blocked_fpr(hi / 2, r, n, c, logx) <= p)
            hi /= 2;
        lo = hi / 2;
    }
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (mid > 0 && blocked_fpr(mid, r, n, c, logx) <= p)
            hi = mid;
        else
            lo = mid;
    }
    return hi;
}

lb_status lb_blocked_size(uint64_t n, double p, uint64_t *m_out, uint64_t *k_out)
{
    if (n == 0)
        return LB_ERR_CAPACITY;
    if (!(p > 0.0 && p < 1.0))
        return LB_ERR_FPR;
    /* a standard filter's m, as a first guess (a blocked one needs more) */
    double guess = ceil((double)n * -log(p) / 0.48045301391820144 / LB_BLOCKED_BLOCK_BITS);
    uint64_t g = guess < 1.0 ? 1 : guess > (double)LB_BLOCKED_MAX_BLOCKS
                                       ? LB_BLOCKED_MAX_BLOCKS
                                       : (uint64_t)guess;
    uint64_t best = 0;
    uint32_t best_r = 0;
    for (uint32_t r = 1; r <= LB_BLOCKED_MAX_ROUNDS; r++) {
        uint64_t blocks = fewest_blocks(n, p, r, best ? best : g);
        if (blocks && (!best || blocks < best)) {
            best = blocks;
            best_r = r;
        }
        else if (best && (!blocks || blocks > best))
            break; /* memory grows with r past the optimum */
    }
    if (!best)
        return LB_ERR_RANGE;
    *m_out = best * LB_BLOCKED_BLOCK_BITS;
    *k_out = (uint64_t)best_r * LB_BLOCKED_LANES;
    return LB_OK;
}
