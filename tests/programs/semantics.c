/* Exercises the instructions the state layer computes beyond moves and plain arithmetic:
   glibc's SSE2/AVX2 string routines (strlen, strchr, memchr, memcmp, memcpy, strcmp), carries
   (__int128), wide multiply and divide, bit scans, rotates, byte swaps, atomics (xadd,
   cmpxchg), and cpuid and rdtsc, whose results the step backend logs. `rtit check-values`
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
        text[round * 97] = 'x';
    }
    sink = acc;
    printf("%llu %llu\n", (unsigned long long)acc, (unsigned long long)counter);
    return 0;
}
