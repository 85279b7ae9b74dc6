/* Exercises the instructions the state layer computes beyond moves and plain arithmetic:
   glibc's SSE2/AVX2 string routines (strlen, strchr, memchr, memcmp, memcpy, strcmp), carries
   (__int128), wide multiply and divide, double shifts, bit scans, rotates, byte swaps, atomics (xadd,
   cmpxchg), vector packs, aligns, shuffles and dword min/max, SSE4.2 string compares, movbe,
   lzcnt and tzcnt, scalar
   float arithmetic that rounds, AVX-512 where the CPU has it (opmasks, masked and zeroing
   writes, masked loads and stores, compares into masks, broadcasts, ternary logic, zmm16-31),
   and cpuid and rdtsc,
   whose results the step backend logs. `rtit check-values`
   compares every sampled register with the CPU's. */
#include <cpuid.h>
#include <stdint.h>
#include <x86intrin.h>
#include <stdio.h>
#include <string.h>

static char text[4096];
static volatile uint64_t sink;

__attribute__((noinline)) static uint64_t mix(uint64_t a, uint64_t b) {
    unsigned __int128 p = (unsigned __int128)a * b;
    unsigned __int128 s = p + ((unsigned __int128)b << 64) + a;
    uint64_t r = (uint64_t)(s >> 64) ^ (uint64_t)s;
    r += (uint64_t)__builtin_ctzll(a | 1) + (uint64_t)(63 - __builtin_clzll(b | 1));
    r ^= (r << 13) | (r >> 51);
    r += __builtin_bswap64(a) + __builtin_bswap32((uint32_t)b);
    r += __builtin_popcountll(a);
    /* Double shifts (shld, shrd), as in glibc's multi-precision printing of floats. */
    unsigned __int128 wide = ((unsigned __int128)a << 64) | b;
    r ^= (uint64_t)((wide << (b & 63)) >> 64) ^ (uint64_t)(wide >> (a & 63));
    if (b != 0) r += a / b + a % b + (uint64_t)((int64_t)a / ((int64_t)b | 1));
    return r;
}

/* Each result flows into the returned sum, which the loop carries in a register: a wrong
   model makes later samples wrong, an unmodelled instruction makes them unknown. */
__attribute__((noinline, target("ssse3,sse4.1,movbe,lzcnt,bmi"))) static uint64_t shuffles(uint64_t a, uint64_t b,
                                                                                const uint64_t *p) {
    __m128i x = _mm_set_epi64x((long long)a, (long long)b);
    __m128i y = _mm_set_epi64x((long long)(b ^ 0x00ff00ff00ff00ffULL), (long long)(a * 3));
    __m128i v[9];
    v[0] = _mm_packus_epi16(x, y);
    v[1] = _mm_packs_epi16(y, x);
    v[2] = _mm_alignr_epi8(x, y, 5);
    v[3] = _mm_min_epu32(x, y);
    v[4] = _mm_max_epi32(x, y);
    v[5] = _mm_castps_si128(_mm_shuffle_ps(_mm_castsi128_ps(x), _mm_castsi128_ps(y), 0x9c));
    v[6] = _mm_castpd_si128(_mm_shuffle_pd(_mm_castsi128_pd(x), _mm_castsi128_pd(y), 1));
    v[7] = _mm_castps_si128(_mm_movehl_ps(_mm_castsi128_ps(x), _mm_castsi128_ps(y)));
    v[8] = _mm_castps_si128(_mm_movelh_ps(_mm_castsi128_ps(y), _mm_castsi128_ps(x)));
    uint64_t r = 0;
    for (int i = 0; i < 9; i++) {
        r = (r << 7 | r >> 57) ^ (uint64_t)_mm_cvtsi128_si64(v[i]) ^ (uint64_t)_mm_extract_epi64(v[i], 1);
    }
    /* lzcnt and tzcnt, zero sources included (the operand size, not bsr/bsf's result). */
    r += (uint64_t)__builtin_ia32_lzcnt_u64(a & 0xffff) + (uint64_t)__builtin_ia32_tzcnt_u64(b & 0xff00);
    r += (uint64_t)__builtin_ia32_lzcnt_u32((unsigned)(a >> 60)) + (uint64_t)__builtin_ia32_tzcnt_u32((unsigned)(b >> 62));
    return r + __builtin_bswap64(*p);
}

/* AVX-512 as glibc's EVEX routines and compilers use it. 24 vectors are live at once, so
   zmm16-31 hold some of them. */
#define AVX512_STEP(x, k)                                                                                  \
    x = _mm512_mask_add_epi32(x, (__mmask16)(d >> (k)) | (__mmask16)(k), x, base);                            \
    x = _mm512_maskz_sub_epi8((__mmask64)(q | z) >> (k), x, text);                                            \
    x = ((k) & 1) ? _mm512_ternarylogic_epi32(x, base, text, 0x96) : _mm512_ternarylogic_epi64(x, base, text, 0xe8); \
    base = _mm512_min_epu8(base, x);
__attribute__((noinline, target("avx512f,avx512bw,avx512vl,avx512dq"))) static uint64_t avx512(uint64_t a, uint64_t b,
                                                                                          const char *s) {
    __m512i text = _mm512_loadu_si512((const void *)s);
    __m512i base = _mm512_set1_epi64((long long)(a ^ (b << 7)));
    __mmask64 z = _mm512_cmpeq_epi8_mask(text, _mm512_setzero_si512());
    __mmask64 q = _mm512_cmpeq_epi8_mask(text, _mm512_set1_epi8('q'));
    __mmask32 lt = _mm256_cmplt_epu8_mask(_mm512_castsi512_si256(text), _mm256_set1_epi8('m'));
    __mmask64 t = _mm512_test_epi8_mask(base, text) ^ _mm512_testn_epi8_mask(base, text);
    __mmask16 d = _mm512_cmpgt_epi32_mask(base, text);
    __m512i x0 = _mm512_set1_epi32((int)a), x1 = _mm512_set1_epi32((int)b), x2 = _mm512_xor_si512(x0, x1);
    __m512i x3 = _mm512_add_epi8(x0, text), x4 = _mm512_sub_epi8(x1, text), x5 = _mm512_or_si512(x2, text);
    __m512i x6 = _mm512_and_si512(x3, x4), x7 = _mm512_andnot_si512(x5, x6), x8 = _mm512_min_epu8(x7, x0);
    __m512i x9 = _mm512_max_epu8(x8, x1), x10 = _mm512_add_epi64(x9, x2), x11 = _mm512_sub_epi32(x10, x3);
    __m512i x12 = _mm512_xor_si512(x11, x4), x13 = _mm512_add_epi16(x12, x5), x14 = _mm512_or_si512(x13, x6);
    __m512i x15 = _mm512_and_si512(x14, x7), x16 = _mm512_add_epi8(x15, x8), x17 = _mm512_xor_si512(x16, x9);
    __m512i x18 = _mm512_sub_epi64(x17, x10), x19 = _mm512_min_epu32(x18, x11), x20 = _mm512_max_epi32(x19, x12);
    __m512i x21 = _mm512_add_epi32(x20, x13), x22 = _mm512_xor_si512(x21, x14), x23 = _mm512_or_si512(x22, x15);
    AVX512_STEP(x0, 0) AVX512_STEP(x1, 1) AVX512_STEP(x2, 2) AVX512_STEP(x3, 3) AVX512_STEP(x4, 4)
    AVX512_STEP(x5, 5) AVX512_STEP(x6, 6) AVX512_STEP(x7, 7) AVX512_STEP(x8, 8) AVX512_STEP(x9, 9)
    AVX512_STEP(x10, 10) AVX512_STEP(x11, 11) AVX512_STEP(x12, 12) AVX512_STEP(x13, 13) AVX512_STEP(x14, 14)
    AVX512_STEP(x15, 15) AVX512_STEP(x16, 16) AVX512_STEP(x17, 17) AVX512_STEP(x18, 18) AVX512_STEP(x19, 19)
    AVX512_STEP(x20, 20) AVX512_STEP(x21, 21) AVX512_STEP(x22, 22) AVX512_STEP(x23, 23)
    __m512i sum = _mm512_xor_si512(
        _mm512_xor_si512(_mm512_xor_si512(_mm512_xor_si512(x0, x1), _mm512_xor_si512(x2, x3)),
                         _mm512_xor_si512(_mm512_xor_si512(x4, x5), _mm512_xor_si512(x6, x7))),
        _mm512_xor_si512(_mm512_xor_si512(_mm512_xor_si512(x8, x9), _mm512_xor_si512(x10, x11)),
                         _mm512_xor_si512(_mm512_xor_si512(x12, x13), _mm512_xor_si512(x14, x15))));
    sum = _mm512_xor_si512(sum, _mm512_xor_si512(_mm512_xor_si512(_mm512_xor_si512(x16, x17), _mm512_xor_si512(x18, x19)),
                                                 _mm512_xor_si512(_mm512_xor_si512(x20, x21), _mm512_xor_si512(x22, x23))));
    char out[64];
    memset(out, '.', sizeof out);
    _mm512_mask_storeu_epi8(out, (__mmask64)lt * 3, sum);
    __m512i back = _mm512_maskz_loadu_epi8(z ? z - 1 : ~(__mmask64)0, out);
    __mmask64 same = _mm512_cmpeq_epi8_mask(back, sum);
    __mmask64 both = _kor_mask64(z, q);
    uint64_t r = _cvtmask64_u64(both) ^ (uint64_t)lt ^ _cvtmask64_u64(t) ^ _cvtmask64_u64(same) ^ (uint64_t)d;
    r += (uint64_t)_kortestz_mask64_u8(z, q) + (uint64_t)_ktestc_mask64_u8(z, q);
    r += (uint64_t)__builtin_ctzll(_cvtmask64_u64(z) | (1ULL << 63));
    r ^= (uint64_t)_mm_cvtsi128_si64(_mm512_castsi512_si128(sum)) ^ (uint64_t)_mm_cvtsi128_si64(_mm512_castsi512_si128(base));
    return r + (uint64_t)out[5];
}

/* SSE4.2's string compares in every aggregation and polarity, implicit and explicit lengths,
   index and mask results; and glibc's strcspn, strspn and strpbrk, which run them. */
__attribute__((noinline, target("sse4.2"))) static uint64_t strings42(const char *s, uint64_t a) {
    __m128i hay = _mm_loadu_si128((const __m128i *)s);
    __m128i set = _mm_set_epi64x(0, (long long)(0x6d6c6b7178000000ULL | (a & 0xffffff)));
    __m128i range = _mm_setr_epi8('a', 'f', 'm', 'q', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    uint64_t r = 0;
    r += (uint64_t)_mm_cmpistri(set, hay, _SIDD_UBYTE_OPS | _SIDD_CMP_EQUAL_ANY);
    r += (uint64_t)_mm_cmpistri(range, hay, _SIDD_UBYTE_OPS | _SIDD_CMP_RANGES | _SIDD_NEGATIVE_POLARITY) << 5;
    r += (uint64_t)_mm_cmpistri(hay, hay, _SIDD_UBYTE_OPS | _SIDD_CMP_EQUAL_EACH | _SIDD_MASKED_NEGATIVE_POLARITY) << 10;
    r += (uint64_t)_mm_cmpistri(_mm_setr_epi8('q', 'x', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), hay,
                                _SIDD_UBYTE_OPS | _SIDD_CMP_EQUAL_ORDERED | _SIDD_MOST_SIGNIFICANT) << 15;
    r += (uint64_t)_mm_cmpestri(set, (int)(a & 7), hay, (int)(a >> 3 & 15), _SIDD_SWORD_OPS | _SIDD_CMP_RANGES) << 20;
    r += (uint64_t)_mm_cmpistrc(set, hay, _SIDD_UBYTE_OPS | _SIDD_CMP_EQUAL_ANY) << 25;
    r += (uint64_t)_mm_cmpistrz(set, hay, _SIDD_UBYTE_OPS | _SIDD_CMP_EQUAL_ANY) << 26;
    __m128i m = _mm_cmpistrm(range, hay, _SIDD_UBYTE_OPS | _SIDD_CMP_RANGES | _SIDD_UNIT_MASK);
    __m128i bits = _mm_cmpestrm(set, 5, hay, 12, _SIDD_UWORD_OPS | _SIDD_CMP_EQUAL_ANY);
    r ^= (uint64_t)_mm_cvtsi128_si64(m) ^ (uint64_t)_mm_extract_epi64(m, 1) << 1 ^ (uint64_t)_mm_cvtsi128_si64(bits);
    r += strcspn(s, "qxz") + (strspn(s, "abcdefghij") << 8) + (uint64_t)(strpbrk(s, "mno") ? 1 : 0);
    return r;
}

/* Scalar double and single arithmetic that rounds (MXCSR is the default from execve on). */
__attribute__((noinline)) static uint64_t floats(uint64_t a, uint64_t b) {
    double x = (double)(a >> 11) * 0x1p-53 + 1.0, y = (double)(b & 0xffff) + 0.1;
    double s = x + y, d = x - y, p = x * y, q = x / y;
    __m128d r = _mm_sqrt_sd(_mm_set_sd(p), _mm_set_sd(p));
    __m128d m = _mm_min_sd(_mm_set_sd(s), _mm_set_sd(d));
    float f = (float)q * 3.0f + (float)s / 7.0f;
    uint64_t bits[4];
    memcpy(&bits[0], &s, 8);
    memcpy(&bits[1], &q, 8);
    bits[2] = (uint64_t)_mm_cvtsd_si64(_mm_set_sd(p * 1e6)) ^ (uint64_t)_mm_cvtsd_si64(r);
    memcpy(&bits[3], &f, 4);
    return bits[0] ^ bits[1] * 3 ^ bits[2] * 5 ^ (bits[3] & 0xffffffff) ^ (uint64_t)_mm_cvtsd_si64(m);
}

int main(void) {
    for (int i = 0; i < 4095; i++) text[i] = (char)('a' + (i * 7) % 26);
    text[4095] = 0;
    uint64_t acc = 0;
    uint64_t counter = 0;
    for (int round = 1; round < 40; round++) {
        text[round * 97] = 0;
        size_t n = strlen(text + round);
        char *c = strchr(text + round, 'q');
        void *m = memchr(text, 'z', (size_t)round * 50);
        char buf[512];
        memcpy(buf, text + round, sizeof buf);
        int cmp = memcmp(buf, text + round, sizeof buf) + strcmp(buf + 3, text + round + 3);
        acc += mix(n * 0x9e3779b97f4a7c15ULL, (uint64_t)round) + (uint64_t)(c ? c - text : 0) +
               (uint64_t)(m ? (char *)m - text : 0) + (uint64_t)cmp;
        __atomic_fetch_add(&counter, (uint64_t)round, __ATOMIC_SEQ_CST);
        uint64_t expected = counter;
        __atomic_compare_exchange_n(&counter, &expected, expected + 1, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
        unsigned ea, eb, ec, ed;
        __cpuid(round & 1, ea, eb, ec, ed);
        acc += ea ^ eb ^ ec ^ ed ^ (__rdtsc() & 1);
        acc += floats(acc, (uint64_t)round * 0x9e3779b9ULL);
        acc += shuffles(acc, n * 0x0101010101010101ULL + (uint64_t)round, &counter);
        acc += strings42(text + round * 50, acc);
        if (__builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
            __builtin_cpu_supports("avx512dq")) {
            acc += avx512(acc, (uint64_t)round, text + round * 61);
        }
        text[round * 97] = 'x';
    }
    sink = acc;
    printf("%llu %llu\n", (unsigned long long)acc, (unsigned long long)counter);
    return 0;
}
