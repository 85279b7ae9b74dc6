/* Exercises the instructions the state layer computes beyond moves and plain arithmetic:
   glibc's SSE2/AVX2 string routines (strlen, strchr, memchr, memcmp, memcpy, strcmp), carries
   (__int128), wide multiply and divide, bit scans, rotates, byte swaps, atomics (xadd,
   cmpxchg), vector packs, aligns, shuffles and dword min/max, movbe, lzcnt and tzcnt, scalar
   float arithmetic that rounds, and cpuid and rdtsc,
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
        text[round * 97] = 'x';
    }
    sink = acc;
    printf("%llu %llu\n", (unsigned long long)acc, (unsigned long long)counter);
    return 0;
}
